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

// later queues fn on the key's reply queue: a key's replies go out one at
// a time, in the order its messages came, while its updates go on. Wait
// waits for them.
func (b *Bot) later(key string, fn func()) {
	b.inflight.Add(1)
	b.replies.submit(key, func() {
		defer b.inflight.Done()
		fn()
	})
}

// offsetTracker computes what polling stores after each processed update:
// the getUpdates offset (one past the highest id below which every update is
// processed) and the ids above it that are processed too. Updates run
// concurrently (one queue per chat), so they finish out of order; after a
// restart Telegram sends everything from the offset again, and the stored
// ids keep those already processed from running twice.
//
// An update whose message could not be stored is held: kept in memory and
// retried, and written into the stored state itself. Once that write
// landed the offset may pass it — Telegram may forget it, since the state
// remembers it — so that one failing update never keeps getUpdates, which
// returns at most 100 updates from the offset, from reaching newer ones.
type offsetTracker struct {
	mu        sync.Mutex
	pending   map[int]bool        // started, not processed
	updates   map[int]update      // the pending updates, to hold them
	held      map[int]*heldUpdate // not stored yet: retried
	done      map[int]bool        // processed, above committed
	maxSeen   int
	committed int
	progress  chan struct{} // a token after each finish
	retired   bool          // its polling term ended: it stores nothing more
	// seq numbers the states it builds, in order; written is the newest
	// one stored (persist).
	seq, written uint64
}

// heldUpdate is an update whose message is not stored yet: storing it
// failed, or it waits in its chat's queue (behind an update of its chat
// being stored, or retried).
type heldUpdate struct {
	Update update `json:"update"`
	// Since is when storing it first failed (zero while it only waits);
	// after giveUpAfter the user is told, and the update is let go.
	Since time.Time `json:"since"`
	// durable is set once a stored state holds it.
	durable bool
}

// offsetState is the stored form.
type offsetState struct {
	Offset int           `json:"offset"`
	Done   []int         `json:"done,omitempty"`
	Held   []*heldUpdate `json:"held,omitempty"`
	// seq orders the states a tracker builds; not stored.
	seq uint64
}

func newOffsetTracker(st offsetState) *offsetTracker {
	o := &offsetTracker{pending: map[int]bool{}, updates: map[int]update{}, held: map[int]*heldUpdate{}, done: map[int]bool{},
		maxSeen: st.Offset - 1, committed: st.Offset, progress: make(chan struct{}, 1)}
	for _, id := range st.Done {
		if id >= st.Offset {
			o.done[id] = true
			o.maxSeen = max(o.maxSeen, id)
		}
	}
	for _, h := range st.Held {
		h.durable = true
		o.held[h.Update.UpdateID] = h
		o.maxSeen = max(o.maxSeen, h.Update.UpdateID)
	}
	return o
}

// heldUpdates returns the held updates, oldest first.
func (o *offsetTracker) heldUpdates() []*heldUpdate {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]*heldUpdate, 0, len(o.held))
	for _, h := range o.held {
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b *heldUpdate) int { return a.Update.UpdateID - b.Update.UpdateID })
	return out
}

// known reports whether id was handed out already: processed (in this run
// or before a restart), held, or still being processed.
func (o *offsetTracker) known(id int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return id < o.committed || o.done[id] || o.pending[id] || o.held[id] != nil
}

// offset is the getUpdates offset to ask with: never past an update that
// is neither processed nor durably held, since asking with a higher offset
// confirms it to Telegram, which then never sends it again.
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

func (o *offsetTracker) start(u update) {
	o.mu.Lock()
	defer o.mu.Unlock()
	id := u.UpdateID
	if o.held[id] == nil {
		o.pending[id] = true
		o.updates[id] = u
	}
	o.maxSeen = max(o.maxSeen, id)
}

// finish marks ids processed and returns the state to store: one state
// for all of them (an album's parts), so that a restart finds them all
// confirmed or none.
func (o *offsetTracker) finish(ids ...int) offsetState {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range ids {
		delete(o.pending, id)
		delete(o.updates, id)
		delete(o.held, id)
		o.done[id] = true
	}
	o.committed = max(o.committed, o.next())
	o.signal()
	return o.state(o.committed)
}

// hold records that us (one update, or an album's parts) could not be
// stored (since when) and returns the state to store, whose offset may
// pass them: the state carries them. Call holdStored once that state is
// stored.
func (o *offsetTracker) hold(since time.Time, us ...update) offsetState {
	o.mu.Lock()
	defer o.mu.Unlock()
	also := make([]int, 0, len(us))
	for _, u := range us {
		delete(o.pending, u.UpdateID)
		delete(o.updates, u.UpdateID)
		if h := o.held[u.UpdateID]; h == nil {
			o.held[u.UpdateID] = &heldUpdate{Update: u, Since: since}
		} else if h.Since.IsZero() {
			h.Since = since // it waited; now storing it failed
		}
		also = append(also, u.UpdateID)
	}
	return o.state(max(o.committed, o.next(also...)))
}

// holdWaiting holds every update not yet stored (waiting in its chat's
// queue, being stored now, or held by a state write that failed) and
// returns their ids and the state to store, whose offset may pass them:
// the state carries them. Call holdStored for each once that state is
// stored.
func (o *offsetTracker) holdWaiting() ([]int, offsetState) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for id := range o.pending {
		o.held[id] = &heldUpdate{Update: o.updates[id]}
		delete(o.pending, id)
		delete(o.updates, id)
	}
	var ids []int
	for id, h := range o.held {
		if !h.durable {
			ids = append(ids, id)
		}
	}
	return ids, o.state(max(o.committed, o.maxSeen+1))
}

// holdStored marks held updates durable: the offset may pass them now.
func (o *offsetTracker) holdStored(ids ...int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range ids {
		if h := o.held[id]; h != nil {
			h.durable = true
		}
	}
	o.committed = max(o.committed, o.next())
	o.signal()
}

// isDurable reports whether the stored state holds every one of us.
func (o *offsetTracker) isDurable(us ...update) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, u := range us {
		if h := o.held[u.UpdateID]; h == nil || !h.durable {
			return false
		}
	}
	return true
}

// next is the offset the updates allow: the lowest update still being
// processed, or held but not yet stored (other than those of also, which
// are taken as stored), else one past the highest seen.
func (o *offsetTracker) next(also ...int) int {
	next := o.maxSeen + 1
	for p := range o.pending {
		next = min(next, p)
	}
	for id, h := range o.held {
		if !h.durable && !slices.Contains(also, id) {
			next = min(next, id)
		}
	}
	return next
}

// state builds the stored form for offset committed; done ids below it
// are forgotten.
func (o *offsetTracker) state(committed int) offsetState {
	o.seq++
	st := offsetState{Offset: committed, seq: o.seq}
	for d := range o.done {
		if d < o.committed {
			delete(o.done, d)
		} else if d >= committed {
			st.Done = append(st.Done, d)
		}
	}
	slices.Sort(st.Done)
	for _, h := range o.held {
		c := *h // a copy: the state is written outside o.mu while hold changes h
		st.Held = append(st.Held, &c)
	}
	slices.SortFunc(st.Held, func(a, b *heldUpdate) int { return a.Update.UpdateID - b.Update.UpdateID })
	return st
}

// superseded reports whether a state built after st is stored already.
// That one holds every update st held that is not processed since, and
// may have let the offset pass updates st has as pending: st, stored
// after it, would drop those from the state while Telegram was already
// told to forget them.
func (o *offsetTracker) superseded(st offsetState) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return st.seq <= o.written
}

// stored records that st is stored.
func (o *offsetTracker) stored(st offsetState) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.written = max(o.written, st.seq)
}

func (o *offsetTracker) signal() {
	select {
	case o.progress <- struct{}{}:
	default:
	}
}

// retire ends the tracker's term: another replica polls now, and what this
// one would store could undo that one's progress.
func (o *offsetTracker) retire() {
	o.mu.Lock()
	o.retired = true
	o.mu.Unlock()
}

func (o *offsetTracker) isRetired() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.retired
}
