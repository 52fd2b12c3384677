package store

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
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

// An export carries the notes its conversation's turns read: its user's
// only — none of another user's, nor of the user's own Telegram topics'
// neighbours — and in a group chat its members share, each member's (and
// no other chat's); the text and Markdown transcripts list them with
// their author, user and source. A forgotten note is in no later export.
func TestExportCarriesNotes(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		at := time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC)
		conv := func(id, key, user string) *ledger.Conversation {
			t.Helper()
			c := &ledger.Conversation{ID: id, SessionKey: key, Channel: "telegram", UserID: user, Status: ledger.StatusActive,
				StartedAt: at, LastActivityAt: at}
			if err := db.CreateConversation(ctx, c); err != nil {
				t.Fatal(err)
			}
			return c
		}
		add := func(user, text, author, convID string, after time.Duration) *ledger.Note {
			t.Helper()
			n := &ledger.Note{UserKey: user, Text: text, Author: author, ConversationID: convID, CreatedAt: at.Add(after)}
			if ok, err := db.AddNote(ctx, n, 0); err != nil || !ok {
				t.Fatalf("add %q: %v, %v", text, ok, err)
			}
			return n
		}
		dm := conv("conv-dm", "telegram:dm:1", "1")
		topic := conv("conv-topic", "telegram:dm:1:topic:5", "1")
		group := conv("conv-group", "telegram:group:-100", "7")
		tea := add("telegram:dm:1", "Ann likes <b>tea</b>", ledger.NoteByUser, dm.ID, 0)
		trip := add("telegram:dm:1", "Ann plans a trip to Lisbon", ledger.NoteByModel, topic.ID, time.Minute)
		add("telegram:dm:11", "Not Ann: another user", ledger.NoteByUser, "", 2*time.Minute)
		m7 := add("telegram:group:-100:7", "Member 7 is the treasurer", ledger.NoteByModel, group.ID, 3*time.Minute)
		m8 := add("telegram:group:-100:8", "Member 8 writes the minutes", ledger.NoteByOperator, "", 4*time.Minute)
		add("telegram:group:-1001:7", "Member 7 in another group", ledger.NoteByModel, "", 5*time.Minute)
		add("telegram:group:-100", "the group chat itself", ledger.NoteByOperator, "", 6*time.Minute)

		ids := func(ns []ledger.Note) []int64 {
			out := make([]int64, len(ns))
			for i, n := range ns {
				out[i] = n.ID
			}
			return out
		}
		for _, c := range []struct {
			conv *ledger.Conversation
			user string
			want []int64
		}{
			{dm, "telegram:dm:1", []int64{trip.ID, tea.ID}},
			{topic, "telegram:dm:1", []int64{trip.ID, tea.ID}},
			{group, "", []int64{m8.ID, m7.ID}},
		} {
			x, err := db.ExportConversation(ctx, c.conv.ID)
			if err != nil {
				t.Fatal(err)
			}
			if x.MemoryUser != c.user || fmt.Sprint(ids(x.Notes)) != fmt.Sprint(c.want) {
				t.Fatalf("%s: memory user %q, notes %+v; want %q, %v", c.conv.SessionKey, x.MemoryUser, x.Notes, c.user, c.want)
			}
		}

		x, err := db.ExportConversation(ctx, dm.ID)
		if err != nil {
			t.Fatal(err)
		}
		var text, md strings.Builder
		if err := x.Write(&text, FormatText); err != nil {
			t.Fatal(err)
		}
		if err := x.Write(&md, FormatMarkdown); err != nil {
			t.Fatal(err)
		}
		wantText := fmt.Sprintf("\nmemory: 2 notes\n  %d model 2026-03-28T12:01:00Z telegram:dm:1 (conversation conv-topic): Ann plans a trip to Lisbon\n"+
			"  %d user 2026-03-28T12:00:00Z telegram:dm:1 (conversation conv-dm): Ann likes <b>tea</b>\n", trip.ID, tea.ID)
		if !strings.HasSuffix(text.String(), wantText) {
			t.Fatalf("text transcript's notes:\n%s\nwant it to end with:\n%s", text.String(), wantText)
		}
		wantMD := fmt.Sprintf("\n## Memory · 2 notes\n\n- `%d model 2026-03-28T12:01:00Z telegram:dm:1 (conversation conv-topic)`\n\n  > Ann plans a trip to Lisbon\n", trip.ID)
		if !strings.Contains(md.String(), wantMD) {
			t.Fatalf("Markdown transcript's notes:\n%s\nwant:\n%s", md.String(), wantMD)
		}

		if ok, err := db.ForgetNote(ctx, "telegram:dm:1", tea.ID); err != nil || !ok {
			t.Fatal(ok, err)
		}
		if x, err := db.ExportConversation(ctx, dm.ID); err != nil || fmt.Sprint(ids(x.Notes)) != fmt.Sprint([]int64{trip.ID}) {
			t.Fatalf("after forgetting: %+v, %v", x.Notes, err)
		}
		if n, err := db.ForgetNotes(ctx, "telegram:dm:1"); err != nil || n != 1 {
			t.Fatal(n, err)
		}
		var js strings.Builder
		if x, err = db.ExportConversation(ctx, dm.ID); err != nil || x.Write(&js, FormatJSON) != nil || strings.Contains(js.String(), `"notes"`) {
			t.Fatalf("an export without notes: %v\n%s", err, js.String())
		}
	})
}

// A turn's read of its user's notes: those sharing a word with the
// message, the best match first, then the newest, each note once, only
// the user's own — however many of another user's notes hold the same
// words.
func TestNotesFor(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
		ann, bob := "telegram:dm:1", "telegram:dm:2"
		ids := map[int64]string{}
		add := func(user, text string, at time.Time) int64 {
			t.Helper()
			n := &ledger.Note{UserKey: user, Text: text, Author: ledger.NoteByModel, CreatedAt: at}
			if ok, err := db.AddNote(ctx, n, 0); err != nil || !ok {
				t.Fatalf("add %q: %v, %v", text, ok, err)
			}
			ids[n.ID] = text
			return n.ID
		}
		// Bob's notes share every word of the query, and are the newest.
		for i := range 40 {
			add(bob, fmt.Sprintf("Bob's Zephyr project, a weather app, note %d.", i), t0.Add(time.Duration(100+i)*time.Hour))
		}
		both := add(ann, "Ann works on the Zephyr project.", t0)
		one := add(ann, "Ann's cat is called Zephyr.", t0.Add(time.Hour))
		short := add(ann, "Ann prefers short answers.", t0.Add(2*time.Hour))
		tea := add(ann, "Ann drinks green tea.", t0.Add(3*time.Hour))
		newest := add(ann, "Ann is vegetarian.", t0.Add(4*time.Hour))

		texts := func(notes []ledger.Note) []string {
			var out []string
			for _, n := range notes {
				if n.UserKey != ann {
					t.Fatalf("another user's note read for Ann: %+v", n)
				}
				out = append(out, n.Text)
			}
			return out
		}
		check := func(query string, limit int, want ...int64) {
			t.Helper()
			got, err := db.NotesFor(ctx, ann, query, limit)
			if err != nil {
				t.Fatal(err)
			}
			var w []string
			for _, id := range want {
				w = append(w, ids[id])
			}
			if g := texts(got); fmt.Sprint(g) != fmt.Sprint(w) {
				t.Fatalf("NotesFor(%q, %d):\n got  %q\n want %q", query, limit, g, w)
			}
		}
		// Both words, then one; then the two newest, of which neither
		// was listed.
		check("How is the Zephyr project going?", 2, both, one, newest, tea)
		// The newest is also relevant: listed once, where it matched.
		check("Any vegetarian recipes?", 2, newest, tea)
		// A limit past her notes: each once, the relevant first (equal
		// matches, the newer first).
		check("zephyr", 10, one, both, newest, tea, short)
		// No word: the newest only.
		check("?!", 2, newest, tea)
	})
}

// A database whose notes were indexed by their plain words (notes_fts,
// the first version) is indexed per user when it is opened: its notes
// are found again, the old index is gone, and the new one follows what
// is written and forgotten after.
func TestNotesIndexPerUserMigrates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.db")
	db := openStore(t, DriverSQLite, path)
	ctx := context.Background()
	for _, q := range []string{
		`DROP TRIGGER notes_terms_insert`, `DROP TRIGGER notes_terms_delete`, `DROP TRIGGER notes_terms_update`, `DROP TABLE notes_terms`,
		`CREATE VIRTUAL TABLE notes_fts USING fts5(text, content='notes', content_rowid='id', tokenize='unicode61 remove_diacritics 2')`,
		`CREATE TRIGGER notes_fts_insert AFTER INSERT ON notes BEGIN
			INSERT INTO notes_fts(rowid, text) VALUES (new.id, new.text); END`,
		`CREATE TRIGGER notes_fts_delete AFTER DELETE ON notes BEGIN
			INSERT INTO notes_fts(notes_fts, rowid, text) VALUES ('delete', old.id, old.text); END`,
	} {
		if err := db.Gorm().Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	ann := "websocket:ann"
	old := &ledger.Note{UserKey: ann, Text: "Ann's cat is called Zephyr.", Author: ledger.NoteByUser, CreatedAt: time.Now()}
	if ok, err := db.AddNote(ctx, old, 0); err != nil || !ok {
		t.Fatalf("add: %v, %v", ok, err)
	}
	db.Close()

	db = openStore(t, DriverSQLite, path)
	recall := func(q string) []ledger.Note {
		t.Helper()
		got, err := db.RecallNotes(ctx, ann, q, 10)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := recall("what is my cat called?"); len(got) != 1 || got[0].ID != old.ID {
		t.Fatalf("the note written before the migration: %+v", got)
	}
	var left int64
	db.Gorm().Raw(`SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'notes_fts%'`).Scan(&left)
	if left != 0 {
		t.Fatalf("%d tables and triggers of the old index left", left)
	}
	n := &ledger.Note{UserKey: ann, Text: "Ann is learning Japanese.", Author: ledger.NoteByUser, CreatedAt: time.Now()}
	if ok, err := db.AddNote(ctx, n, 0); err != nil || !ok {
		t.Fatalf("add: %v, %v", ok, err)
	}
	if got := recall("japanese"); len(got) != 1 || got[0].ID != n.ID {
		t.Fatalf("a note written after the migration: %+v", got)
	}
	if ok, err := db.ForgetNote(ctx, ann, old.ID); err != nil || !ok {
		t.Fatalf("forget: %v, %v", ok, err)
	}
	if got := recall("cat zephyr"); len(got) != 0 {
		t.Fatalf("a forgotten note found: %+v", got)
	}
}

// Every write of a user's notes changes their version — the store's own
// writes on both stores, and on PostgreSQL another process's statements
// too — and a write of another user's notes leaves it be (on
// PostgreSQL; SQLite's count of writes is kept in stripes of users).
func TestNotesVersionFollowsEveryWrite(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		user, other := fmt.Sprint("websocket:version-", time.Now().UnixNano()), "websocket:someone-else"
		at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
		version := func() ledger.NotesVersion {
			t.Helper()
			v, err := db.NotesVersion(ctx, user)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		changes := func(what string, write func()) {
			t.Helper()
			before := version()
			write()
			if after := version(); after == before {
				t.Fatalf("%s left the version at %+v", what, before)
			}
		}
		add := func(u, text, key string) *ledger.Note {
			n := &ledger.Note{UserKey: u, Text: text, Author: ledger.NoteByModel, CallKey: key, CreatedAt: at}
			if ok, err := db.AddNote(ctx, n, 0); err != nil || !ok {
				t.Fatalf("add: %v, %v", ok, err)
			}
			return n
		}
		var first *ledger.Note
		changes("a note added", func() { first = add(user, "one", "k1") })
		changes("a note added again by its call key", func() { add(user, "one", "k1") })
		changes("a note forgotten", func() {
			if ok, err := db.ForgetNote(ctx, user, first.ID); err != nil || !ok {
				t.Fatalf("forget: %v, %v", ok, err)
			}
		})
		add(user, "two", "")
		changes("every note forgotten", func() {
			if _, err := db.ForgetNotes(ctx, user); err != nil {
				t.Fatal(err)
			}
		})
		conv := fmt.Sprint("00000000-0000-0000-0000-", time.Now().UnixNano()%1_000_000_000_000)
		if err := db.AddExtraction(ctx, ledger.Extraction{ConversationID: conv, SessionKey: user, Channel: "websocket", UserKey: user,
			State: ledger.ExtractDue, CreatedAt: at}); err != nil {
			t.Fatal(err)
		}
		x, err := db.ClaimExtraction(ctx, "me", []string{"me"}, at, at.Add(time.Minute))
		if err != nil || x == nil {
			t.Fatalf("claim: %+v, %v", x, err)
		}
		changes("an extraction's notes", func() {
			if _, err := db.SettleExtraction(ctx, ledger.ExtractionEnd{ConversationID: conv, Owner: "me", Attempt: x.Attempt,
				State: ledger.ExtractDone, At: at, Notes: []ledger.Note{{UserKey: user, Text: "three", Author: ledger.NoteByReset,
					CallKey: conv + "/0", CreatedAt: at}}}); err != nil {
				t.Fatal(err)
			}
		})
		if db.driver != DriverPostgres {
			return
		}
		before := version()
		add(other, "not theirs", "")
		if after := version(); after.Changes != before.Changes {
			t.Fatalf("another user's note changed the version read: %+v → %+v", before, after)
		}
		changes("another process's insert", func() {
			if err := db.write.Exec(`INSERT INTO notes (user_key, text, author, created_at) VALUES (?, 'four', 'model', ?)`, user, at).Error; err != nil {
				t.Fatal(err)
			}
		})
		changes("another process's delete", func() {
			if err := db.write.Exec(`DELETE FROM notes WHERE user_key = ? AND text = 'three'`, user).Error; err != nil {
				t.Fatal(err)
			}
		})
	})
}

// On PostgreSQL the turns asking at once are answered by one statement:
// each still gets its own user's version.
func TestNotesVersionsReadTogether(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		if db.driver != DriverPostgres {
			t.Skip("SQLite's versions are read from memory")
		}
		ctx := context.Background()
		users := make([]string, 8)
		for i := range users {
			users[i] = fmt.Sprint("websocket:batch-", i)
			for range i {
				if ok, err := db.AddNote(ctx, &ledger.Note{UserKey: users[i], Text: "x", Author: ledger.NoteByUser, CreatedAt: time.Now()}, 0); err != nil || !ok {
					t.Fatal(ok, err)
				}
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8*25)
		for i, u := range users {
			for range 25 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					v, err := db.NotesVersion(ctx, u)
					if err == nil && v.Changes != int64(i) {
						err = fmt.Errorf("%s: %d changes, want %d", u, v.Changes, i)
					}
					if err != nil {
						errs <- err
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	})
}
