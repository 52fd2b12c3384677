package sessions

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// Owed conversations (owed by watcher.After): conversations where this
// replica may own turns that none of its runners holds, because a storage
// call on them failed. The rescuer looks at each once it is due and
// claims again what nobody here holds; a look that fails, or finds a turn
// it cannot take yet (its user's turn lock is busy), is tried again
// later, with backoff.

// owedConv is one owed conversation.
type owedConv struct {
	gen  uint64    // bumped by every owe: a look only pays what it saw
	due  time.Time // wall clock: the next look
	wait time.Duration
}

type owedRef struct {
	conv string
	gen  uint64
}

// errBusy: the turn's user has a turn running here or on another replica;
// the owed turn is looked at again later.
var errBusy = errors.New("the session's turn lock is busy")

// owedSet is this replica's owed conversations, each due at once when
// owed and again after a backoff when a look could not pay it.
type owedSet struct {
	mu    sync.Mutex
	convs map[string]*owedConv
	pause time.Duration // the first backoff (Options.RetryPause); at most 20 times it
}

func newOwedSet(pause time.Duration) *owedSet {
	return &owedSet{convs: map[string]*owedConv{}, pause: pause}
}

// owe marks conv owed, due at once.
func (s *owedSet) owe(conv string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.convs[conv]
	if o == nil {
		o = &owedConv{}
		s.convs[conv] = o
	}
	o.gen++
	o.due, o.wait = time.Time{}, 0
}

// due lists the owed conversations due now.
func (s *owedSet) due() []owedRef {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []owedRef
	for conv, o := range s.convs {
		if !o.due.After(now) {
			out = append(out, owedRef{conv, o.gen})
		}
	}
	return out
}

// next is how long until the next owed conversation is due, or false
// when none is owed.
func (s *owedSet) next() (time.Duration, bool) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var next time.Duration
	found := false
	for _, o := range s.convs {
		d := max(o.due.Sub(now), 0)
		if !found || d < next {
			next, found = d, true
		}
	}
	return next, found
}

// paid settles a look at an owed conversation: done, it is forgotten
// unless owed again since; not done, it is due again after a backoff.
func (s *owedSet) paid(r owedRef, done bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.convs[r.conv]
	switch {
	case o == nil:
	case done && o.gen == r.gen:
		delete(s.convs, r.conv)
	case !done:
		o.wait = min(max(2*o.wait, s.pause), 20*s.pause)
		o.due = time.Now().Add(o.wait)
	}
}

// count is how many conversations are owed.
func (s *owedSet) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.convs)
}

// rescueOwed looks at every owed conversation that is due: it claims
// again, and runs or delivers, each turn this replica owns there that no
// runner here holds.
func (r *Rescuer) rescueOwed(ctx context.Context, maxAge time.Duration) (ran int) {
	due := r.owed.due()
	if len(due) == 0 {
		return 0
	}
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		sem = make(chan struct{}, r.cfg.concurrency)
	)
	for _, o := range due {
		turns, err := r.store.OwnTurns(ctx, o.conv, r.cfg.replica)
		if err != nil {
			r.owed.paid(o, false)
			continue
		}
		var free []ledger.DueTurn
		for _, d := range turns {
			if !r.turns.holding(turnKey{d.ConversationID, d.Seq}) {
				free = append(free, d)
			}
		}
		if len(free) == 0 {
			r.owed.paid(o, true)
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			r.owed.paid(o, false)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			done := true
			for _, d := range free {
				kind, err := r.rescueTurn(ctx, d, maxAge, true)
				if err != nil {
					done = false
					if !errors.Is(err, errBusy) && !errors.Is(err, ErrShuttingDown) && ctx.Err() == nil {
						r.cfg.log.Warn("claiming an own turn again failed; retried", "session_key", d.SessionKey, "seq", d.Seq, "error", err.Error())
					}
					break // the user's later turns wait behind it
				}
				if kind == ledger.TurnRunning {
					mu.Lock()
					ran++
					mu.Unlock()
				}
			}
			r.owed.paid(o, done)
		}()
	}
	wg.Wait()
	return ran
}
