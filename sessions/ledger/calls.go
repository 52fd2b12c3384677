package ledger

import "context"

// Call is one ledger call, as hooks see it. A store that is observed
// (the session manager's Observed port) passes every ledger call through
// its hooks: the manager's watcher sees them so, and a test's fault
// injector fails them so.
type Call struct {
	// Op is the name of the ledger method called.
	Op string
	// Conv is the conversation the call is about; "" when none.
	Conv string
	// Append is the append of an Op "Append" call.
	Append *Append
	// ID tells this call apart from every other of the store's, for a
	// hook that decides in Before what it does in After.
	ID uint64
}

// Hook sees every ledger call of a store.
type Hook interface {
	// Before runs before the call reaches the database. An error fails
	// the call without making it.
	Before(ctx context.Context, c Call) error
	// After runs once the call is made or failed, with its error, and
	// returns the call's error: err itself, or a failure of its own for
	// a call that landed (whose answer is then lost).
	After(ctx context.Context, c Call, err error) error
}
