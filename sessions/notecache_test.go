package sessions

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/notecorpus"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// A turn's ranking of a user's kept notes gives what the database's
// search gives for the same notes (store's TestNotesFor): those sharing
// a word with the message, more and rarer words first, the newer first
// among equals, then the newest, each note once.
func TestCachedNotesRankAsTheDatabaseDoes(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	texts := []string{"Ann works on the Zephyr project.", "Ann's cat is called Zephyr.", "Ann prefers short answers.",
		"Ann drinks green tea.", "Ann is vegetarian."}
	var notes []ledger.Note // newest first, as Notes returns them
	for i, text := range texts {
		notes = append([]ledger.Note{{ID: int64(i + 1), UserKey: "telegram:dm:1", Text: text, CreatedAt: t0.Add(time.Duration(i) * time.Hour)}}, notes...)
	}
	u := newUserNotes(ledger.NotesVersion{}, notes)
	both, one, short, tea, newest := texts[0], texts[1], texts[2], texts[3], texts[4]
	for _, c := range []struct {
		query string
		limit int
		want  []string
	}{
		{"How is the Zephyr project going?", 2, []string{both, one, newest, tea}},
		{"Any vegetarian recipes?", 2, []string{newest, tea}},
		{"zephyr", 10, []string{one, both, newest, tea, short}},
		{"?!", 2, []string{newest, tea}},
		// A rarer word outranks a common one: "ann" is in every note.
		{"ann tea", 1, []string{tea, newest}},
	} {
		var got []string
		for _, n := range u.notesFor(c.query, c.limit) {
			got = append(got, n.Text)
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("notesFor(%q, %d):\n got  %q\n want %q", c.query, c.limit, got, c.want)
		}
	}
	if got := newUserNotes(ledger.NotesVersion{}, nil).notesFor("zephyr", 5); len(got) != 0 {
		t.Fatalf("no notes: %v", got)
	}
}

// The copy is bounded by bytes, the least recently used dropped first,
// and a copy replaced is not counted twice.
func TestNoteCacheBound(t *testing.T) {
	note := func(i int) []ledger.Note {
		return []ledger.Note{{ID: int64(i), Text: strings.Repeat("word ", 40)}}
	}
	one := newUserNotes(ledger.NotesVersion{}, note(1)).size
	c := newNoteCache(10 * one)
	for i := range 30 {
		c.put(fmt.Sprint("u", i%20), newUserNotes(ledger.NotesVersion{Local: uint64(i)}, note(i)))
	}
	if c.bytes > c.max || c.lru.Len() > 10 || c.lru.Len() == 0 {
		t.Fatalf("%d copies, %d bytes, bound %d", c.lru.Len(), c.bytes, c.max)
	}
	if _, ok := c.get("u9", ledger.NotesVersion{Local: 29}); !ok {
		t.Fatal("the most recent copy was dropped")
	}
	if _, ok := c.get("u9", ledger.NotesVersion{Local: 9}); ok {
		t.Fatal("a copy taken for another version")
	}
	var sum int64
	for _, k := range c.lru.Keys() {
		u, _ := c.lru.Peek(k)
		sum += u.size
	}
	if sum != c.bytes {
		t.Fatalf("counted %d bytes, holds %d", c.bytes, sum)
	}
}

// opCounter counts a store's calls by op.
type opCounter struct {
	mu  sync.Mutex
	ops map[string]int
}

func (o *opCounter) Before(context.Context, ledger.Call) error { return nil }
func (o *opCounter) After(_ context.Context, c ledger.Call, err error) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ops[c.Op]++
	return err
}
func (o *opCounter) take() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	got := o.ops
	o.ops = map[string]int{}
	return got
}

// A user's notes are read once and ranked from memory at the turns
// after, until they change — here, by a write of this process, and on
// PostgreSQL by a write of another process (a replica) as well, which
// this process's count of its own writes cannot see.
func TestNotesReadOnceUntilTheyChange(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(t0)
		rec := &recorder{}
		m := newManager(t, db, rec, c, memoryPolicies(ResetPolicy{Mode: ResetNone}, MemorySettings{Enabled: true, InjectTokens: 400}))
		key := "websocket:cy"
		user := MemoryUser(key, "cy")
		ctx := context.Background()
		if _, err := m.Memory().Remember(ctx, NoteRequest{Channel: "websocket", User: user, Text: "Cy grows tomatoes.", Author: ledger.NoteByUser}); err != nil {
			t.Fatal(err)
		}
		ops := &opCounter{ops: map[string]int{}}
		defer db.Observe(ops)()
		reads := func() int { got := ops.take(); return got["Notes"] + got["NotesFor"] }
		handle(t, m, msg(key, "how are the tomatoes?"))
		if n := reads(); n != 1 {
			t.Fatalf("first turn read the notes %d times, want 1", n)
		}
		handle(t, m, msg(key, "and the tomatoes now?"))
		if n := reads(); n != 0 {
			t.Fatalf("a turn with the notes unchanged read them %d times", n)
		}
		if !strings.Contains(rec.last().MemoryText(), "tomatoes") {
			t.Fatalf("memory = %q", rec.last().MemoryText())
		}
		n, err := m.Memory().Remember(ctx, NoteRequest{Channel: "websocket", User: user, Text: "Cy's tomatoes are cherry tomatoes.", Author: ledger.NoteByUser})
		if err != nil {
			t.Fatal(err)
		}
		handle(t, m, msg(key, "tomatoes?"))
		if !strings.Contains(rec.last().MemoryText(), "cherry") {
			t.Fatalf("a note written here is missing from the next request: %q", rec.last().MemoryText())
		}
		if db.Driver() != store.DriverPostgres {
			return
		}
		// Another replica forgets a note and writes one: its statements,
		// not this process's. This process's copy still holds the note:
		// no request may carry it from here on, not even one made and
		// then dropped (an early call's, made before its message's
		// commit read the version).
		ops.take()
		handle(t, m, msg(key, "cherry tomatoes?"))
		if !strings.Contains(rec.last().MemoryText(), "cherry") {
			t.Fatalf("the kept copy lacks the note: %q", rec.last().MemoryText())
		}
		if got := ops.take(); got["Notes"]+got["NotesFor"] != 0 {
			t.Fatalf("a turn with the notes unchanged read them: %v", got)
		}
		before := rec.calls.Load()
		if err := db.Gorm().Exec(`DELETE FROM notes WHERE id = ?`, n.ID).Error; err != nil {
			t.Fatal(err)
		}
		handle(t, m, msg(key, "tomatoes?"))
		for _, req := range rec.since(int(before)) {
			if mem := req.MemoryText(); strings.Contains(mem, "cherry") || !strings.Contains(mem, "grows") {
				t.Fatalf("after another replica's forget, a request's memory = %q", mem)
			}
		}
		if err := db.Gorm().Exec(`INSERT INTO notes (user_key, text, author, created_at) VALUES (?, ?, ?, ?)`,
			user, "Cy waters the tomatoes at dawn.", ledger.NoteByModel, c.Now()).Error; err != nil {
			t.Fatal(err)
		}
		handle(t, m, msg(key, "tomatoes?"))
		if mem := rec.last().MemoryText(); !strings.Contains(mem, "dawn") {
			t.Fatalf("after another replica's note, memory = %q", mem)
		}
		if n := reads(); n != 2 {
			t.Fatalf("two changes by another replica: the notes were read %d times, want 2", n)
		}
	})
}

// While other early calls wait for their commits (a busy gateway), a
// turn's version of its user's notes comes with its message's commit, in
// the pipeline all of them share: no statement of its own. Its request
// still waits for that version, so a note another replica forgot before
// the commit is not in it.
func TestEarlyCallsTakeTheNotesVersionFromTheirCommit(t *testing.T) {
	db := openStore(t, store.DriverPostgres, postgresDSN(t))
	c := newClock(t0)
	rec := &recorder{}
	m := newManager(t, db, rec, c, memoryPolicies(ResetPolicy{Mode: ResetNone}, MemorySettings{Enabled: true, InjectTokens: 400}))
	key := "websocket:di"
	user := MemoryUser(key, "di")
	ctx := context.Background()
	var kept []ledger.Note
	for _, text := range []string{"Di rows on the river.", "Di's boat is called Heron."} {
		n, err := m.Memory().Remember(ctx, NoteRequest{Channel: "websocket", User: user, Text: text, Author: ledger.NoteByUser})
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, n)
	}
	handle(t, m, msg(key, "how is the boat?"))
	if mem := rec.last().MemoryText(); !strings.Contains(mem, "Heron") {
		t.Fatalf("memory = %q", mem)
	}
	// Another early call waits (as at 50 clients, always one).
	m.Memory().gated.Add(1)
	defer m.Memory().gated.Add(-1)
	ops := &opCounter{ops: map[string]int{}}
	defer db.Observe(ops)()
	// The message's commit starts once the turn's request waits for it
	// (however late the goroutine preparing the request runs).
	waiting := make(chan struct{}, 1)
	m.Memory().waiting = func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	defer db.Observe(beforeAppend(func(a *ledger.Append) {
		if len(a.Messages) != 1 || a.Messages[0].Content != "and the boat now?" && a.Messages[0].Content != "the river?" {
			return
		}
		select {
		case <-waiting:
		case <-time.After(10 * time.Second):
			t.Error("the turn's request never waited for its commit")
		}
	}))()
	if err := db.Gorm().Exec(`DELETE FROM notes WHERE id = ?`, kept[1].ID).Error; err != nil {
		t.Fatal(err)
	}
	before := rec.calls.Load()
	handle(t, m, msg(key, "and the boat now?"))
	got := ops.take()
	if got["NotesVersion"] != 0 {
		t.Fatalf("the version was read apart (%d statements): %v", got["NotesVersion"], got)
	}
	if got["Notes"] != 1 {
		t.Fatalf("the notes changed on another replica, read %d times: %v", got["Notes"], got)
	}
	reqs := rec.since(int(before))
	if len(reqs) == 0 {
		t.Fatal("no request")
	}
	for _, req := range reqs {
		if mem := req.MemoryText(); strings.Contains(mem, "Heron") || !strings.Contains(mem, "river") {
			t.Fatalf("after another replica's forget, a request's memory = %q", mem)
		}
	}
	select {
	case <-waiting: // the second turn's, should its request have waited twice
	default:
	}
	handle(t, m, msg(key, "the river?"))
	if got := ops.take(); got["NotesVersion"]+got["Notes"] != 0 {
		t.Fatalf("the notes unchanged: %v", got)
	}
}

// BenchmarkCachedNotesFor times a turn's ranking of its user's kept
// notes (100, as the memory bench's users keep):
//
//	go test -run '^$' -bench CachedNotesFor -benchmem ./sessions/
func BenchmarkCachedNotesFor(b *testing.B) {
	var notes []ledger.Note
	for i, text := range notecorpus.Notes(1, 100) {
		notes = append(notes, ledger.Note{ID: int64(i + 1), Text: text, CreatedAt: t0.Add(-time.Duration(i) * time.Minute)})
	}
	u := newUserNotes(ledger.NotesVersion{}, notes)
	msgs := notecorpus.Messages(2, 64)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		u.notesFor(msgs[i%len(msgs)], injectCandidates)
	}
}
