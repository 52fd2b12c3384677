package sessions

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"gorm.io/gorm"
)

// committer group-commits writes: each worker takes every write waiting in
// the queue (up to maxBatch), runs them in one transaction and commits once.
// A caller returns when its write's batch is committed, so an acknowledged
// message is on disk, while concurrent turns share the cost of a commit (one
// fsync on SQLite) instead of paying one each. Writes rarely fail (a stale
// conversation, a duplicate client id); when one does, the batch is rolled
// back and its writes run again one transaction each, so no write sees
// another's failure.
type committer struct {
	db       *gorm.DB
	maxBatch int
	queue    chan *writeOp

	mu     sync.RWMutex // guards closed against sends on a closed queue
	closed bool
	wg     sync.WaitGroup
}

type writeOp struct {
	fn   func(tx *gorm.DB) error
	err  error
	done chan struct{}
}

func newCommitter(db *gorm.DB, workers, maxBatch int) *committer {
	if maxBatch <= 0 {
		maxBatch = 512
	}
	c := &committer{db: db, maxBatch: maxBatch, queue: make(chan *writeOp, maxBatch*workers)}
	for i := 0; i < workers; i++ {
		c.wg.Add(1)
		go c.run()
	}
	return c
}

// do runs fn in a group-committed transaction and returns its error, or the
// commit's. ctx bounds only the wait for a place in the queue: once queued,
// the write is committed or failed, never abandoned half-way.
func (c *committer) do(ctx context.Context, fn func(tx *gorm.DB) error) error {
	op := &writeOp{fn: fn, done: make(chan struct{})}
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return ErrClosed
	}
	select {
	case c.queue <- op:
	case <-ctx.Done():
		c.mu.RUnlock()
		return ctx.Err()
	}
	c.mu.RUnlock()
	<-op.done
	return op.err
}

func (c *committer) run() {
	defer c.wg.Done()
	batch := make([]*writeOp, 0, c.maxBatch)
	for op := range c.queue {
		batch = append(batch[:0], op)
	fill:
		for len(batch) < c.maxBatch {
			select {
			case more, ok := <-c.queue:
				if !ok {
					break fill
				}
				batch = append(batch, more)
			default:
				break fill
			}
		}
		c.commit(batch)
	}
}

// errOpFailed aborts a batch transaction when one of its writes failed.
var errOpFailed = errors.New("a write in the batch failed")

func (c *committer) commit(batch []*writeOp) {
	err := c.db.Transaction(func(tx *gorm.DB) error {
		for _, op := range batch {
			if op.err = op.fn(tx); op.err != nil {
				return errOpFailed
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, errOpFailed) && len(batch) > 1:
		for _, op := range batch {
			op.err = c.db.Transaction(op.fn)
		}
	case errors.Is(err, errOpFailed):
		// A batch of one: op.err is its own error.
	case err != nil:
		for _, op := range batch {
			op.err = fmt.Errorf("commit: %w", err)
		}
	}
	for _, op := range batch {
		close(op.done)
	}
}

// close lets queued writes finish, then stops the workers.
func (c *committer) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	close(c.queue)
	c.mu.Unlock()
	c.wg.Wait()
}
