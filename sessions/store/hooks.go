package store

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// Every ledger call of a DB passes one interception point: the hooks
// (ledger.Hook) installed with Observe see it before it reaches the
// database, and may fail it there, and see its outcome after, and may
// turn it into a failure. The session manager's watcher (the storage health, and the
// conversations a failed call leaves owed) and the fault injector of the
// tests are hooks, so both see every call through the same path, and a
// ledger method added to DB is seen by both as long as it starts with
// observe — which TestEveryLedgerCallIsObserved checks of every method of
// the sessions.Ledger port. Its error is classified there too: one the
// database will give for every try is marked ledger.ErrRejected
// (rejected).

// hooks are the installed hooks, in the order of Observe: Before runs in
// that order until one fails, and After runs in that order on every one.
type hooks struct {
	mu    sync.Mutex
	list  atomic.Pointer[[]*installed]
	calls atomic.Uint64 // numbers the calls the hooks see
}

// installed is one Observe's hook: removed by its identity, since a
// hook's own value need not be comparable.
type installed struct{ ledger.Hook }

// Observe installs h for every ledger call from now on, after the hooks
// already installed; remove uninstalls it.
func (s *DB) Observe(h ledger.Hook) (remove func()) {
	s.hooks.mu.Lock()
	defer s.hooks.mu.Unlock()
	var list []*installed
	if cur := s.hooks.list.Load(); cur != nil {
		list = slices.Clone(*cur)
	}
	in := &installed{h}
	list = append(list, in)
	s.hooks.list.Store(&list)
	var once sync.Once
	return func() {
		once.Do(func() {
			s.hooks.mu.Lock()
			defer s.hooks.mu.Unlock()
			cur := *s.hooks.list.Load()
			i := slices.Index(cur, in)
			if i < 0 {
				return
			}
			next := slices.Delete(slices.Clone(cur), i, i+1)
			s.hooks.list.Store(&next)
		})
	}
}

// observe makes one ledger call, fn, through the hooks. A failed call
// returns T's zero value.
func observe[T any](ctx context.Context, s *DB, c ledger.Call, fn func() (T, error)) (T, error) {
	var zero T
	list := s.hooks.list.Load()
	if list == nil || len(*list) == 0 {
		v, err := fn()
		if err != nil {
			return zero, rejected(err)
		}
		return v, nil
	}
	c.ID = s.hooks.calls.Add(1)
	var v T
	var err error
	for _, h := range *list {
		if err = h.Before(ctx, c); err != nil {
			break
		}
	}
	if err == nil {
		v, err = fn()
	}
	// A refusal for good is told apart here, where every ledger call's
	// error passes, so that the hooks see it as the caller does; and again
	// after them, for a failure a hook made (the fault injector's).
	err = rejected(err)
	for _, h := range *list {
		err = h.After(ctx, c, err)
	}
	if err != nil {
		return zero, rejected(err)
	}
	return v, nil
}

// observe0 is observe for a call that returns only an error.
func observe0(ctx context.Context, s *DB, c ledger.Call, fn func() error) error {
	_, err := observe(ctx, s, c, func() (struct{}, error) { return struct{}{}, fn() })
	return err
}
