package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/faults"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// While every storage call fails, /readyz's storage line says since when;
// once one succeeds, the check passes again.
func TestStorageCheckSaysSinceWhenUnreachable(t *testing.T) {
	db, err := store.Open(context.Background(), store.DriverSQLite, filepath.Join(t.TempDir(), "gateway.db"), store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fs := faults.New(db)
	mgr := sessions.New(db, agent.Echo{}, sessions.Options{})
	defer mgr.Shutdown(context.Background())
	check := storageCheck(db, mgr)
	if err := check(); err != nil {
		t.Fatalf("check before any failure: %v", err)
	}
	in := sessions.Inbound{Channel: "websocket", SessionKey: "websocket:ann", Text: "hi"}
	fs.Outage(1, faults.Before)
	if _, err := mgr.Submit(context.Background(), in, sessions.Hooks{}); !errors.Is(err, faults.ErrInjected) {
		t.Fatalf("Submit during the outage: %v", err)
	}
	if err := check(); err == nil || !strings.HasPrefix(err.Error(), "unreachable since ") {
		t.Fatalf("check during the outage = %v, want unreachable since …", err)
	}
	fs.Heal()
	if _, err := mgr.Handle(context.Background(), in, sessions.Hooks{}); err != nil {
		t.Fatal(err)
	}
	if err := check(); err != nil {
		t.Fatalf("check after the outage: %v", err)
	}
}
