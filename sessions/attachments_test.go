package sessions

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// seeing is a recorder that reads images.
type seeing struct{ *recorder }

func (seeing) ReadsImages() bool { return true }

// images is a channel's store of image bytes by hash, as a Fetcher sees it.
type images struct {
	mu      sync.Mutex
	byHash  map[string][]byte
	fetched int
}

func (im *images) fetch(_ context.Context, a agent.Attachment) ([]byte, error) {
	im.mu.Lock()
	defer im.mu.Unlock()
	im.fetched++
	if b, ok := im.byHash[a.Hash]; ok {
		return b, nil
	}
	return nil, errors.New("gone")
}

func (im *images) forget(hash string) { im.mu.Lock(); delete(im.byHash, hash); im.mu.Unlock() }

func TestAttachmentsAreStoredAndFetchedPerTurn(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		rec := &recorder{}
		m := newManager(t, db, seeing{rec}, newClock(time.Now()), nil)
		im := &images{byHash: map[string][]byte{"h1": []byte("png-1")}}
		m.Routes().Register("websocket", Route{Fetch: im.fetch})

		in := msg("websocket:ann", "look")
		in.Attachments = []agent.Attachment{{Kind: agent.KindImage, Mime: "image/png", Hash: "h1", Size: 5, Data: []byte("never stored")}}
		out := handle(t, m, in)
		got := rec.last().InputAttachments
		if len(got) != 1 || len(got[0]) != 1 || string(got[0][0].Data) != "png-1" || got[0][0].Missing {
			t.Fatalf("first turn's attachments = %+v", got)
		}
		rows := transcript(t, db, out.ConversationID)
		if rows[0].Attachments != `[{"kind":"image","mime":"image/png","size":5,"hash":"h1"}]` {
			t.Fatalf("stored attachments = %q", rows[0].Attachments)
		}
		// An image alone is a message; nothing at all is not.
		alone := msg("websocket:ann", "")
		alone.Attachments = in.Attachments
		handle(t, m, alone)
		if _, err := m.Handle(context.Background(), msg("websocket:ann", " "), Hooks{}); !errors.Is(err, ErrEmptyMessage) {
			t.Fatalf("empty message: %v", err)
		}
		// Later turns fetch the history's images again, and tell a gone one.
		handle(t, m, msg("websocket:ann", "again"))
		if h := rec.last().History; len(h) != 4 || string(h[0].Attachments[0].Data) != "png-1" || string(h[2].Attachments[0].Data) != "png-1" {
			t.Fatalf("history = %+v", h)
		}
		im.forget("h1")
		handle(t, m, msg("websocket:ann", "still?"))
		if h := rec.last().History; !h[0].Attachments[0].Missing || h[0].Attachments[0].Data != nil || h[4].Attachments != nil {
			t.Fatalf("history once gone = %+v", h)
		}
		// The transcript a client reads names them.
		tr, err := m.Conversations().Open(context.Background(), msg("websocket:ann", ""), -1, 100)
		if err != nil || len(tr.Entries[0].Attachments) != 1 || tr.Entries[0].Attachments[0].Hash != "h1" {
			t.Fatalf("transcript = %+v, %v", tr, err)
		}
	})
}

// A database from before attachments gains the column; a turn the rescuer
// runs from stored rows gets its message's images.
func TestAttachmentsAfterUpgradeAndRescue(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		if err := db.Gorm().Migrator().DropColumn(&Message{}, "attachments"); err != nil {
			t.Fatal(err)
		}
		db.Close()
		db = open()
		ctx := context.Background()
		now := time.Now().UTC()
		conv := Conversation{ID: "00000000-0000-0000-0000-0000000000c1", SessionKey: "websocket:cy", Channel: "websocket",
			Status: StatusActive, StartedAt: now, LastActivityAt: now}
		if err := db.CreateConversation(ctx, &conv); err != nil {
			t.Fatal(err)
		}
		due := now.Add(-time.Minute)
		row := Message{ConversationID: conv.ID, Seq: 1, Role: "user", Content: "what is this?", Status: MsgOK, CreatedAt: now.Add(-time.Minute),
			Attachments: encodeAttachments([]agent.Attachment{{Kind: agent.KindImage, Mime: "image/jpeg", Hash: "h2", Size: 3}}),
			TurnState:   TurnInterrupted, TurnDue: &due}
		if err := db.Append(ctx, ledger.Append{Conv: &conv, At: now, Messages: []Message{row}}); err != nil {
			t.Fatal(err)
		}
		rec := &recorder{}
		m := newManager(t, db, seeing{rec}, newClock(now), nil)
		m.Routes().Register("websocket", Route{Deliver: noopDeliver, Fetch: (&images{byHash: map[string][]byte{"h2": []byte("jpg")}}).fetch})
		if ran, _, err := m.Rescuer().Recover(ctx, time.Hour); ran != 1 || err != nil {
			t.Fatalf("Recover = %d, %v", ran, err)
		}
		req := rec.last()
		if req.Input != "what is this?" || len(req.InputAttachments) != 1 || string(req.InputAttachments[0][0].Data) != "jpg" {
			t.Fatalf("rescued request = %+v", req)
		}
		if rows := transcript(t, db, conv.ID); !strings.Contains(rows[0].Attachments, `"hash":"h2"`) {
			t.Fatalf("rows = %+v", rows)
		}
	})
}

// A turn fetches at most MaxTurnImages pictures, the newest.
func TestATurnFetchesTheNewestImagesOnly(t *testing.T) {
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/g.db")
	rec := &recorder{}
	m := newManager(t, db, seeing{rec}, newClock(time.Now()), nil)
	im := &images{byHash: map[string][]byte{}}
	m.Routes().Register("websocket", Route{Fetch: im.fetch})
	n := MaxTurnImages + 2
	for i := range n {
		hash := string(rune('a' + i))
		im.byHash[hash] = []byte(hash)
		in := msg("websocket:dan", "pic "+hash)
		in.Attachments = []agent.Attachment{{Kind: agent.KindImage, Mime: "image/png", Hash: hash}}
		handle(t, m, in)
	}
	im.fetched = 0
	handle(t, m, msg("websocket:dan", "which was first?"))
	h := rec.last().History
	var missing, present []string
	for _, msg := range h {
		for _, a := range msg.Attachments {
			if a.Missing {
				missing = append(missing, a.Hash)
			} else {
				present = append(present, string(a.Data))
			}
		}
	}
	if im.fetched != MaxTurnImages || strings.Join(missing, "") != "ab" || len(present) != MaxTurnImages || present[0] != "c" {
		t.Fatalf("fetched %d; missing %v, present %v", im.fetched, missing, present)
	}
}
