package sessions

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// An early call whose request is slow to prepare (its picture fetched
// while its message's commit lands) does not take the version that
// commit read: another replica's forget after the commit, before the
// request is built, is not in the request.
func TestEarlyCallSlowToPrepareReadsTheNotesVersionAgain(t *testing.T) {
	db := openStore(t, store.DriverPostgres, postgresDSN(t))
	c := newClock(t0)
	rec := &recorder{}
	m := newManager(t, db, seeing{rec}, c, memoryPolicies(ResetPolicy{Mode: ResetNone}, MemorySettings{Enabled: true, InjectTokens: 400}))
	key := "websocket:eve"
	user := MemoryUser(key, "eve")
	ctx := context.Background()
	var kept []ledger.Note
	for _, text := range []string{"Eve rows on the river.", "Eve's boat is called Heron."} {
		n, err := m.Memory().Remember(ctx, NoteRequest{Channel: "websocket", User: user, Text: text, Author: ledger.NoteByUser})
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, n)
	}
	handle(t, m, msg(key, "how is the boat?"))
	if !strings.Contains(rec.last().MemoryText(), "Heron") {
		t.Fatalf("the kept copy lacks the note: %q", rec.last().MemoryText())
	}
	const text = "the boat, pictured?"
	stored := make(chan struct{})
	var once sync.Once
	defer db.Observe(afterAppend(func(a *ledger.Append) {
		if len(a.Messages) == 1 && a.Messages[0].Content == text {
			once.Do(func() { close(stored) })
		}
	}))()
	fetch := func(ctx context.Context, a agent.Attachment) ([]byte, error) {
		// The message's commit lands while the picture is fetched; then
		// another replica forgets a note.
		select {
		case <-stored:
		case <-time.After(10 * time.Second):
			t.Error("the message was not stored while its picture was fetched")
		}
		if err := db.Gorm().Exec(`DELETE FROM notes WHERE id = ?`, kept[1].ID).Error; err != nil {
			return nil, err
		}
		return []byte("png"), nil
	}
	m.Routes().Register("websocket", Route{Fetch: fetch})
	before := rec.calls.Load()
	in := msg(key, text)
	in.Attachments = []agent.Attachment{{Kind: agent.KindImage, Mime: "image/png", Hash: "h1", Size: 3}}
	handle(t, m, in)
	reqs := rec.since(int(before))
	if len(reqs) == 0 {
		t.Fatal("no request")
	}
	for _, req := range reqs {
		if mem := req.MemoryText(); strings.Contains(mem, "Heron") || !strings.Contains(mem, "river") {
			t.Fatalf("a request built after another replica's forget: memory %q", mem)
		}
	}
}

// afterAppend is a store hook calling fn with each append that landed.
type afterAppend func(a *ledger.Append)

func (afterAppend) Before(context.Context, ledger.Call) error { return nil }
func (f afterAppend) After(_ context.Context, c ledger.Call, err error) error {
	if err == nil && c.Op == "Append" && c.Append != nil {
		f(c.Append)
	}
	return err
}

// beforeAppend is a store hook calling fn before each append.
type beforeAppend func(a *ledger.Append)

func (f beforeAppend) Before(_ context.Context, c ledger.Call) error {
	if c.Op == "Append" && c.Append != nil {
		f(c.Append)
	}
	return nil
}
func (beforeAppend) After(_ context.Context, _ ledger.Call, err error) error { return err }
