package sessions

import (
	"context"
	"errors"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// How a turn survives a storage failure. The invariant the ledger keeps:
// a turn that is not settled is either held by a runner alive in this
// process now, or due — claimable by anyone after its backoff. Every
// storage call a turn makes may fail, and a failed call may even have
// landed (a commit whose answer was lost): a claim taken, a reply stored,
// a message stored that its sender was told was not. So no path trusts
// itself to leave the turn in order. Instead, every failed call on a
// conversation marks the conversation owed (watched, below): this
// replica may own turns there that none of its runners holds. The
// rescuer looks at each owed conversation once storage answers again,
// reads the turns this replica owns there (OwnTurns) and claims again,
// through the same conditional update as every other claim, each one no
// runner here holds (heldSeqs). A runner that is still retrying keeps its
// turn; one that gave up has handed it back (due), or left it owed.

// definite reports whether err is the database's answer to a write it
// judged — the conversation moved on, the id is stored, the claim is
// another's, what it carries is refused for good — rather than a failure
// to reach it.
func definite(err error) bool {
	return errors.Is(err, ledger.ErrStale) || errors.Is(err, ledger.ErrDuplicate) || errors.Is(err, ledger.ErrLostClaim) ||
		errors.Is(err, ledger.ErrRejected)
}

// watcher is the manager's hook on its store (ledger.Hook): every ledger
// call's outcome feeds the storage health, and a failed call on a
// conversation makes it owed.
type watcher struct{ m *Manager }

// Before lets every call through.
func (w watcher) Before(context.Context, ledger.Call) error { return nil }

// After records a call's outcome.
func (w watcher) After(ctx context.Context, c ledger.Call, err error) error {
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return err // the caller gave up; the database said nothing
	}
	herr := err
	if errors.Is(err, ledger.ErrRejected) {
		herr = nil // the database answered: storage is up
	}
	w.m.health.observe(herr, time.Now())
	if err == nil && c.Append != nil && c.Append.Usage != nil {
		u := c.Append.Usage
		w.m.opts.Observer.Spent(u.Channel, u.Model, u.PromptTokens, u.CompletionTokens, u.Cost)
	}
	if err != nil && c.Conv != "" && !definite(err) {
		w.m.rescue.owe(c.Conv)
	}
	return err
}
