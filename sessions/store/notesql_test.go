package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// Notes are recalled by the words they share with a query, the most
// relevant first and the newer among equals, only ever the user's own;
// a writer run again writes its note once; the limit holds under
// concurrent writers; forgetting deletes, for that user only.
func TestNotes(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
		add := func(user, text, key string, at time.Time) *ledger.Note {
			t.Helper()
			n := &ledger.Note{UserKey: user, Text: text, Author: ledger.NoteByModel, CallKey: key, CreatedAt: at}
			ok, err := db.AddNote(ctx, n, 0)
			if err != nil || !ok {
				t.Fatalf("add %q: %v, %v", text, ok, err)
			}
			return n
		}
		ann, bob := "telegram:dm:1", "telegram:dm:2"
		name := add(ann, "Her name is Ann; she prefers short answers.", "", t0)
		zephyr := add(ann, "Ann works on the Zephyr project, a weather app.", "", t0.Add(time.Hour))
		add(ann, "Ann's cat is called Zephyr too.", "", t0.Add(2*time.Hour))
		add(bob, "Bob works on Zephyr's backend.", "", t0)

		got, err := db.RecallNotes(ctx, ann, "Zephyr: project status?", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].ID != zephyr.ID {
			t.Fatalf("recall: %+v, want the project note first and the cat's second, none of Bob's", got)
		}
		for _, n := range got {
			if n.UserKey != ann {
				t.Fatalf("another user's note recalled: %+v", n)
			}
		}
		// Words only reach the search: its syntax in a query is text.
		for _, q := range []string{`zephyr" OR user_key:*`, `NEAR(ann zephyr)`, `'; DROP TABLE notes; --`, `a & b | !c`, ""} {
			if _, err := db.RecallNotes(ctx, ann, q, 10); err != nil {
				t.Fatalf("recall %q: %v", q, err)
			}
		}
		if got, _ := db.RecallNotes(ctx, bob, "short answers", 10); len(got) != 0 {
			t.Fatalf("Bob recalls Ann's notes: %+v", got)
		}

		// The same writer again: one note.
		first := add(ann, "Ann is vegetarian.", "call-7", t0.Add(3*time.Hour))
		again := add(ann, "Ann is vegetarian.", "call-7", t0.Add(4*time.Hour))
		if again.ID != first.ID || !again.CreatedAt.Equal(first.CreatedAt) {
			t.Fatalf("a writer run again wrote a second note: %+v, %+v", first, again)
		}
		if _, err := db.AddNote(ctx, &ledger.Note{UserKey: bob, Text: "x", Author: ledger.NoteByModel, CallKey: "call-7", CreatedAt: t0}, 0); err == nil {
			t.Fatal("a call key of Ann's note wrote Bob's")
		}
		all, err := db.Notes(ctx, ann, 100)
		if err != nil || len(all) != 4 || all[0].ID != first.ID {
			t.Fatalf("Ann's notes, newest first: %+v, %v", all, err)
		}

		// Forgetting: one, by its owner only; then all.
		if ok, err := db.ForgetNote(ctx, bob, name.ID); err != nil || ok {
			t.Fatalf("Bob forgot Ann's note: %v, %v", ok, err)
		}
		if ok, err := db.ForgetNote(ctx, ann, name.ID); err != nil || !ok {
			t.Fatalf("forget: %v, %v", ok, err)
		}
		if got, _ := db.RecallNotes(ctx, ann, "short answers", 10); len(got) != 0 {
			t.Fatalf("a forgotten note recalled: %+v", got)
		}
		if n, err := db.ForgetNotes(ctx, ann); err != nil || n != 3 {
			t.Fatalf("forget all: %d, %v", n, err)
		}
		if got, _ := db.RecallNotes(ctx, ann, "zephyr", 10); len(got) != 0 {
			t.Fatalf("notes recalled after forgetting all: %+v", got)
		}
		if got, _ := db.RecallNotes(ctx, bob, "zephyr", 10); len(got) != 1 {
			t.Fatalf("Bob's note went with Ann's: %+v", got)
		}
	})
}

// The per-user limit holds when writers race, on two connection pools.
func TestNoteLimitRace(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		dbs := []*DB{open(), open()}
		var wg sync.WaitGroup
		for i := range 24 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := &ledger.Note{UserKey: "websocket:ann", Text: fmt.Sprint("note ", i), Author: ledger.NoteByModel, CreatedAt: time.Now()}
				if _, err := dbs[i%2].AddNote(context.Background(), n, 3); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		all, err := dbs[0].Notes(context.Background(), "websocket:ann", 100)
		if err != nil || len(all) != 3 {
			t.Fatalf("%d notes kept under a limit of 3 (%v)", len(all), err)
		}
	})
}
