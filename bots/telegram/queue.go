package telegram

import (
	"context"
	"slices"
	"sync"
	"time"
)

// keyQueues runs functions one at a time per key, in submission order, and
// different keys side by side. A key's goroutine exits when its queue is
// empty.
type keyQueues struct {
	mu     sync.Mutex
	queues map[string][]func()
}

func newKeyQueues() *keyQueues { return &keyQueues{queues: map[string][]func(){}} }

func (q *keyQueues) submit(key string, fn func()) {
	q.mu.Lock()
	pending, running := q.queues[key]
	q.queues[key] = append(pending, fn)
	q.mu.Unlock()
	if !running {
		go q.drain(key)
	}
}

func (q *keyQueues) drain(key string) {
	for {
		q.mu.Lock()
		pending := q.queues[key]
		if len(pending) == 0 {
			delete(q.queues, key)
			q.mu.Unlock()
			return
		}
		fn := pending[0]
		q.queues[key] = pending[1:]
		q.mu.Unlock()
		fn()
	}
}

// offsetTracker computes what polling stores after each processed update:
// the getUpdates offset (one past the highest id below which every update is
// processed) and the ids above it that are processed too. Updates run
// concurrently (one queue per chat), so they finish out of order; after a
// restart Telegram sends everything from the offset again, and the stored
// ids keep those already processed from running twice.
type offsetTracker struct {
	mu        sync.Mutex
	pending   map[int]bool // started, not processed
	done      map[int]bool // processed, above committed
	maxSeen   int
	committed int
	progress  chan struct{} // a token after each finish
}

// offsetState is the stored form.
type offsetState struct {
	Offset int   `json:"offset"`
	Done   []int `json:"done,omitempty"`
}

func newOffsetTracker(st offsetState) *offsetTracker {
	o := &offsetTracker{pending: map[int]bool{}, done: map[int]bool{}, maxSeen: st.Offset - 1, committed: st.Offset,
		progress: make(chan struct{}, 1)}
	for _, id := range st.Done {
		if id >= st.Offset {
			o.done[id] = true
			o.maxSeen = max(o.maxSeen, id)
		}
	}
	return o
}

// known reports whether id was handed out already: processed (in this run
// or before a restart) or still being processed.
func (o *offsetTracker) known(id int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return id < o.committed || o.done[id] || o.pending[id]
}

// offset is the getUpdates offset to ask with: never past an update that
// is not processed, since asking with a higher offset confirms it to
// Telegram, which then never sends it again.
func (o *offsetTracker) offset() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.committed
}

// waitProgress waits until some update finishes, ctx ends, or max passes.
func (o *offsetTracker) waitProgress(ctx context.Context, max time.Duration) {
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-o.progress:
	case <-ctx.Done():
	case <-t.C:
	}
}

func (o *offsetTracker) start(id int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pending[id] = true
	o.maxSeen = max(o.maxSeen, id)
}

// finish marks id processed and returns the state to store.
func (o *offsetTracker) finish(id int) offsetState {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.pending, id)
	o.done[id] = true
	next := o.maxSeen + 1
	if len(o.pending) > 0 {
		ids := make([]int, 0, len(o.pending))
		for p := range o.pending {
			ids = append(ids, p)
		}
		next = slices.Min(ids)
	}
	o.committed = max(o.committed, next)
	st := offsetState{Offset: o.committed}
	for d := range o.done {
		if d < o.committed {
			delete(o.done, d)
		} else {
			st.Done = append(st.Done, d)
		}
	}
	slices.Sort(st.Done)
	select {
	case o.progress <- struct{}{}:
	default:
	}
	return st
}
