package store_test

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
	"github.com/chatgate/chatgate/sessions/storetest"
)

// refuser is a hook that records every call and fails it before it
// reaches the database.
type refuser struct {
	mu     sync.Mutex
	before []string
	after  []string
}

var errRefused = errors.New("refused by the test's hook")

func (r *refuser) Before(_ context.Context, c ledger.Call) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.before = append(r.before, c.Op)
	return errRefused
}

func (r *refuser) After(_ context.Context, c ledger.Call, err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.after = append(r.after, c.Op)
	return err
}

// Every method of the sessions.Ledger port passes the store's hooks, under
// its own name: a method added to the port and to DB without observe
// fails here, so neither the manager's watcher nor the fault injector can
// miss it. Each is called with zero arguments; the hook refuses it before
// it reaches the database.
func TestEveryLedgerCallIsObserved(t *testing.T) {
	db := storetest.Open(t, store.DriverSQLite, filepath.Join(t.TempDir(), "gateway.db"), store.OpenOptions{})
	r := &refuser{}
	remove := db.Observe(r)
	defer remove()
	port := reflect.TypeFor[sessions.Ledger]()
	if port.NumMethod() < 25 {
		t.Fatalf("the Ledger port has %d methods", port.NumMethod())
	}
	impl := reflect.ValueOf(db)
	ctx := reflect.ValueOf(context.Background())
	for i := range port.NumMethod() {
		name := port.Method(i).Name
		t.Run(name, func(t *testing.T) {
			m := impl.MethodByName(name)
			args := make([]reflect.Value, m.Type().NumIn())
			for j := range args {
				args[j] = reflect.Zero(m.Type().In(j))
			}
			args[0] = ctx
			r.mu.Lock()
			r.before, r.after = nil, nil
			r.mu.Unlock()
			out := m.Call(args)
			errOut := out[len(out)-1].Interface()
			if err, _ := errOut.(error); !errors.Is(err, errRefused) {
				t.Errorf("%s returned %v, want the hook's refusal: it did not pass the hooks", name, errOut)
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			if !slices.Equal(r.before, []string{name}) || !slices.Equal(r.after, []string{name}) {
				t.Errorf("%s: the hook saw Before %v, After %v; want the call once, by its name", name, r.before, r.after)
			}
		})
	}
}

// Hooks see a call in the order they were installed, Before and After
// alike; a hook that fails a call in Before keeps it from the database,
// and every hook's After still sees the failure; a removed hook sees
// nothing more.
func TestHooksRunInOrder(t *testing.T) {
	db := storetest.Open(t, store.DriverSQLite, filepath.Join(t.TempDir(), "gateway.db"), store.OpenOptions{})
	var mu sync.Mutex
	var seen []string
	record := func(s string) {
		mu.Lock()
		seen = append(seen, s)
		mu.Unlock()
	}
	first := hookFuncs{before: func(c ledger.Call) error { record("1 before " + c.Op); return nil },
		after: func(c ledger.Call, err error) error { record("1 after " + errText(err)); return err }}
	second := hookFuncs{before: func(c ledger.Call) error { record("2 before " + c.Op); return errRefused },
		after: func(c ledger.Call, err error) error { record("2 after " + errText(err)); return err }}
	removeFirst := db.Observe(first)
	removeSecond := db.Observe(second)
	if _, err := db.Conversation(context.Background(), "c1"); !errors.Is(err, errRefused) {
		t.Fatalf("Conversation: %v, want the refusal", err)
	}
	want := []string{"1 before Conversation", "2 before Conversation", "1 after refused", "2 after refused"}
	if !slices.Equal(seen, want) {
		t.Fatalf("hooks ran %q, want %q", seen, want)
	}
	removeSecond()
	seen = nil
	if c, err := db.Conversation(context.Background(), "c1"); err != nil || c != nil {
		t.Fatalf("Conversation: %v, %v; want no conversation, no error", c, err)
	}
	if want := []string{"1 before Conversation", "1 after ok"}; !slices.Equal(seen, want) {
		t.Fatalf("hooks ran %q, want %q", seen, want)
	}
	removeFirst()
	seen = nil
	db.Conversation(context.Background(), "c1")
	if len(seen) != 0 {
		t.Fatalf("removed hooks ran %q", seen)
	}
}

type hookFuncs struct {
	before func(ledger.Call) error
	after  func(ledger.Call, error) error
}

func (h hookFuncs) Before(_ context.Context, c ledger.Call) error           { return h.before(c) }
func (h hookFuncs) After(_ context.Context, c ledger.Call, err error) error { return h.after(c, err) }

func errText(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, errRefused):
		return "refused"
	}
	return err.Error()
}
