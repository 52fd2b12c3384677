package locks

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/clocktest"
)

func TestNoTwoHolders(t *testing.T) {
	for _, keys := range []int{1, 3, 1000} {
		t.Run(fmt.Sprintf("keys=%d", keys), func(t *testing.T) {
			// A small MaxEntries makes eviction happen constantly while other
			// goroutines hold and await the same keys.
			c := New(Options{MaxEntries: 2})
			holders := make([]atomic.Int32, keys)
			var violations atomic.Int32
			var wg sync.WaitGroup
			for g := 0; g < 64; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					for i := 0; i < 300; i++ {
						k := (g*7 + i) % keys
						release, err := c.Acquire(context.Background(), fmt.Sprint("k", k))
						if err != nil {
							t.Error(err)
							return
						}
						if holders[k].Add(1) != 1 {
							violations.Add(1)
						}
						if i%10 == 0 {
							runtime.Gosched()
						}
						holders[k].Add(-1)
						release()
					}
				}(g)
			}
			wg.Wait()
			if v := violations.Load(); v != 0 {
				t.Fatalf("%d times a key had two holders", v)
			}
			if s := c.Stats(); s.Idle > 2 || s.Entries != s.Idle {
				t.Fatalf("after all releases: %+v, want at most 2 idle and nothing held", s)
			}
		})
	}
}

func TestFIFO(t *testing.T) {
	c := New(Options{})
	release, err := c.Acquire(context.Background(), "user")
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	var order []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		queued := make(chan struct{})
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			close(queued)
			r, err := c.Acquire(context.Background(), "user")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			r()
		}(i)
		<-queued
		waitForWaiters(t, c, "user", i+1)
	}
	release()
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("waiters ran in order %v, want arrival order", order)
		}
	}
}

// waitForWaiters blocks until key has n queued waiters, so that the test
// controls arrival order without sleeping for a guessed duration.
func waitForWaiters(t *testing.T, c *Cache, key string, n int) {
	t.Helper()
	for i := 0; ; i++ {
		c.mu.Lock()
		got := 0
		if e := c.entries[key]; e != nil {
			got = e.waiters.Len()
		}
		c.mu.Unlock()
		if got == n {
			return
		}
		if i > 1_000_000 {
			t.Fatalf("key %q has %d waiters, want %d", key, got, n)
		}
		runtime.Gosched()
	}
}

func TestCancelledWaiterLeavesQueue(t *testing.T) {
	c := New(Options{})
	release, _ := c.Acquire(context.Background(), "k")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "k")
		errc <- err
	}()
	waitForWaiters(t, c, "k", 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire returned %v, want context.Canceled", err)
	}
	waitForWaiters(t, c, "k", 0)
	release()
	// The key must be free now: the cancelled waiter did not take it.
	r2, ok := c.TryAcquire("k")
	if !ok {
		t.Fatal("key still held after its holder released and its only waiter gave up")
	}
	r2()
}

func TestReleaseIsIdempotent(t *testing.T) {
	c := New(Options{})
	r1, _ := c.Acquire(context.Background(), "k")
	r1()
	r2, ok := c.TryAcquire("k")
	if !ok {
		t.Fatal("TryAcquire failed on a released key")
	}
	r1() // a stale second call must not release r2's hold
	if _, ok := c.TryAcquire("k"); ok {
		t.Fatal("a repeated release freed somebody else's lock")
	}
	r2()
}

func TestHeldAndAwaitedEntriesAreNeverEvicted(t *testing.T) {
	clock := clocktest.New(time.Unix(0, 0))
	c := New(Options{MaxEntries: 1, TTL: time.Minute, Now: clock.Now})
	held, _ := c.Acquire(context.Background(), "held")
	got := make(chan struct{})
	go func() {
		r, err := c.Acquire(context.Background(), "held")
		if err == nil {
			close(got)
			r()
		}
	}()
	waitForWaiters(t, c, "held", 1)
	for i := 0; i < 100; i++ {
		r, _ := c.Acquire(context.Background(), fmt.Sprint("other", i))
		r()
		clock.Advance(time.Hour)
	}
	c.Sweep()
	if _, ok := c.TryAcquire("held"); ok {
		t.Fatal("a held entry was evicted: a second caller could take it")
	}
	held()
	<-got
}

func TestTTLExpiresIdleEntries(t *testing.T) {
	clock := clocktest.New(time.Unix(0, 0))
	c := New(Options{MaxEntries: 100, TTL: time.Minute, Now: clock.Now})
	for i := 0; i < 10; i++ {
		r, _ := c.Acquire(context.Background(), fmt.Sprint(i))
		r()
	}
	if s := c.Stats(); s.Idle != 10 {
		t.Fatalf("idle = %d, want 10", s.Idle)
	}
	clock.Advance(59 * time.Second)
	c.Sweep()
	if s := c.Stats(); s.Idle != 10 {
		t.Fatalf("idle = %d before the TTL, want 10", s.Idle)
	}
	clock.Advance(time.Second)
	c.Sweep()
	if s := c.Stats(); s.Entries != 0 {
		t.Fatalf("entries = %d after the TTL, want 0", s.Entries)
	}
}

func TestMillionKeysStayBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000,000 keys: skipped in -short")
	}
	c := New(Options{MaxEntries: 10_000})
	for i := 0; i < 1_000_000; i++ {
		r, err := c.Acquire(context.Background(), fmt.Sprint("user:", i))
		if err != nil {
			t.Fatal(err)
		}
		r()
		if s := c.Stats(); i%100_000 == 0 && s.Entries > 10_000 {
			t.Fatalf("after %d keys: %d entries, want at most 10,000", i, s.Entries)
		}
	}
	if s := c.Stats(); s.Entries != 10_000 || s.Idle != 10_000 {
		t.Fatalf("after 1,000,000 keys: %+v, want 10,000 idle entries", s)
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	b.Run("one-key", func(b *testing.B) {
		c := New(Options{})
		ctx := context.Background()
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			r, _ := c.Acquire(ctx, "k")
			r()
		}
	})
	b.Run("distinct-keys", func(b *testing.B) {
		c := New(Options{})
		ctx := context.Background()
		keys := make([]string, 1<<20)
		for i := range keys {
			keys[i] = fmt.Sprint("telegram:dm:", i)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			r, _ := c.Acquire(ctx, keys[i&(len(keys)-1)])
			r()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		c := New(Options{})
		ctx := context.Background()
		var n atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				k := fmt.Sprint("k", n.Add(1)%1000)
				r, _ := c.Acquire(ctx, k)
				r()
			}
		})
	})
}
