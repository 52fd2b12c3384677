package store

import (
	"context"
	"testing"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// A key's choice of model is one row: read back, replaced, forgotten, kept
// when the database is opened again, and purged only when the key has no
// conversation left and the choice is older than the cutoff.
func TestModelChoice(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		ctx := context.Background()
		db := open()
		at := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
		if got, err := db.ModelChoice(ctx, "telegram:dm:7"); err != nil || got != "" {
			t.Fatalf("no choice yet: %q, %v", got, err)
		}
		for _, name := range []string{"Fast", "Smart"} {
			if err := db.SetModelChoice(ctx, "telegram:dm:7", name, at); err != nil {
				t.Fatal(err)
			}
			if got, err := db.ModelChoice(ctx, "telegram:dm:7"); err != nil || got != name {
				t.Fatalf("choice = %q, %v; want %q", got, err, name)
			}
		}
		if err := db.SetModelChoice(ctx, "websocket:ann", "Fast", at); err != nil {
			t.Fatal(err)
		}
		if err := db.SetModelChoice(ctx, "websocket:guest-1", "Fast", at); err != nil {
			t.Fatal(err)
		}
		if err := db.SetModelChoice(ctx, "websocket:gone", "Fast", at); err != nil {
			t.Fatal(err)
		}
		if err := db.SetModelChoice(ctx, "websocket:gone", "", at); err != nil {
			t.Fatal(err)
		}
		if got, _ := db.ModelChoice(ctx, "websocket:gone"); got != "" {
			t.Fatalf("a forgotten choice reads %q", got)
		}
		// ann has a conversation, the guest none.
		conv := &ledger.Conversation{ID: "c-ann", SessionKey: "websocket:ann", Channel: "websocket", Status: ledger.StatusActive, StartedAt: at, LastActivityAt: at}
		if err := db.CreateConversation(ctx, conv); err != nil {
			t.Fatal(err)
		}
		if n, err := db.PurgeModelChoices(ctx, at); err != nil || n != 0 {
			t.Fatalf("purge before the cutoff: %d, %v", n, err)
		}
		if n, err := db.PurgeModelChoices(ctx, at.Add(time.Hour)); err != nil || n != 2 {
			t.Fatalf("purge: %d, %v; want the guest's and telegram:dm:7's", n, err)
		}
		if got, _ := db.ModelChoice(ctx, "websocket:ann"); got != "Fast" {
			t.Fatalf("a key with a conversation lost its choice: %q", got)
		}
		if got, _ := db.ModelChoice(ctx, "websocket:guest-1"); got != "" {
			t.Fatalf("the guest's choice outlived the purge: %q", got)
		}
		if err := db.SetModelChoice(ctx, "telegram:dm:8", "Smart", at); err != nil {
			t.Fatal(err)
		}
		db.Close()
		db = open()
		if got, err := db.ModelChoice(ctx, "telegram:dm:8"); err != nil || got != "Smart" {
			t.Fatalf("after reopening: %q, %v", got, err)
		}
	})
}
