package sessions

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"gorm.io/gorm"
)

// TestGroupCommitIsolatesAFailingWrite: writes queued together share a
// transaction; one that fails (after writing) leaves nothing behind, and the
// others still commit.
func TestGroupCommitIsolatesAFailingWrite(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		// One worker, so that the queued writes form one batch.
		c := newCommitter(db.write, 1, 128)
		defer c.close()
		// Hold the writer busy so that the next writes queue into one batch.
		busy, release := make(chan struct{}), make(chan struct{})
		go c.do(ctx, func(tx *gorm.DB) error { close(busy); <-release; return nil })
		<-busy
		boom := errors.New("boom")
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = c.do(ctx, func(tx *gorm.DB) error {
					if err := tx.Create(&ChannelState{Key: fmt.Sprint("k", i), Value: "v"}).Error; err != nil {
						return err
					}
					if i == 3 {
						return boom // after its own insert
					}
					return nil
				})
			}()
		}
		for len(c.queue) < len(errs) {
			waitQueue()
		}
		close(release)
		wg.Wait()
		for i, err := range errs {
			if (i == 3) != errors.Is(err, boom) || (i != 3 && err != nil) {
				t.Fatalf("write %d: %v", i, err)
			}
		}
		var keys []string
		db.Gorm().Model(&ChannelState{}).Order("name").Pluck("name", &keys)
		if fmt.Sprint(keys) != "[k0 k1 k2 k4 k5 k6 k7]" {
			t.Fatalf("stored %v: the failed write left a row, or took others with it", keys)
		}
	})
}
