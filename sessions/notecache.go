package sessions

// The notes a turn carries, from memory: each user's notes are read from
// the database once and kept with their version (ledger.NotesVersion),
// and a turn ranks the kept copy. A search of the database at every turn
// cost a turn on the echo agent ten times its own CPU on SQLite and half
// on PostgreSQL (docs/performance.md, "Memory"); the version is read from
// memory on SQLite and by one indexed statement on PostgreSQL, so a note
// written or forgotten by any process is in, or gone from, the next
// request as before.
//
// A turn ranks the notes as the databases' full-text searches rank them,
// with Okapi BM25 (FTS5's bm25, k1 1.2, b 0.75), over the same words
// (ledger.SearchWords): a note holding more of the message's words, and
// rarer ones among the user's notes, ranks first; the newer first among
// equals. The statistics are the user's own notes'.

import (
	"cmp"
	"context"
	"math"
	"slices"
	"sync"
	"unsafe"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/chatgate/chatgate/sessions/ledger"
)

const (
	// noteCacheBytes bounds the kept copies, least recently used dropped
	// first; noteCacheNotes is the most notes a user's copy holds: a user
	// with more is searched in the database (NotesFor), as the full-text
	// indexes are made for.
	noteCacheBytes = 32 << 20
	noteCacheNotes = 1000
	// BM25's parameters, FTS5's.
	bm25K1 = 1.2
	bm25B  = 0.75
)

// noteCache keeps users' notes (userNotes) by user, within noteCacheBytes.
type noteCache struct {
	mu    sync.Mutex
	lru   *simplelru.LRU[string, *userNotes]
	bytes int64
	max   int64
}

func newNoteCache(maxBytes int64) *noteCache {
	c := &noteCache{max: maxBytes}
	// Bounded by bytes (put), not by entries.
	c.lru, _ = simplelru.NewLRU(math.MaxInt32, func(_ string, u *userNotes) { c.bytes -= u.size })
	return c
}

// get returns user's copy if it was read after version v.
func (c *noteCache) get(user string, v ledger.NotesVersion) (*userNotes, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	u, ok := c.lru.Get(user)
	if !ok || u.version != v {
		return nil, false
	}
	return u, true
}

// put keeps u, dropping the least recently used copies over the bound.
func (c *noteCache) put(user string, u *userNotes) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Remove(user) // an older copy: its bytes are taken off
	if u.size > c.max/8 {
		return // too big to keep
	}
	c.lru.Add(user, u)
	c.bytes += u.size
	for c.bytes > c.max {
		c.lru.RemoveOldest()
	}
}

// notesGate carries the version of a user's notes that an early call's
// message's commit reads on a store other processes write notes to
// (ledger.Append.NotesOf, PostgreSQL): the call's request waits for that
// commit, then takes the kept copy of that version — the notes of no
// other. So a request goes out only after its message is stored, with no
// note forgotten before that commit, and the turn pays no round trip of
// its own for the version: the read rides in the commit's pipeline,
// shared by every append of it. (Taking the copy before the commit and
// checking it after let a request made from a stale copy reach the
// model's provider first; see docs/performance.md, "Memory".)
type notesGate struct {
	user string
	once sync.Once
	// changes is set by open, before ready is closed: the version the
	// commit read, or -1 when it read none (the version is then read
	// apart, as for any turn).
	changes int64
	ready   chan struct{}
}

// open lets the request go with the version the commit read (changes;
// -1: none). Only the first call counts. The store calls it as the
// version comes (ledger.Append.NotesRead), before the commit's outcome
// is known: like any early call's, a request out before its message's
// commit fails is dropped unseen.
func (g *notesGate) open(changes int64) {
	g.once.Do(func() {
		g.changes = changes
		close(g.ready)
	})
}

// wait returns the version of gate's notes (-1: none read) once it is
// known; false when ctx ended first. When no other early call waits for
// its commit (a quiet gateway), the version is also read apart at once,
// in parallel with the commit, and the first answer counts: a round trip
// then costs no one else's turn, and the commit's may take longer (its
// fsync). When others wait, their commits share one read per pipeline.
//
// Only a version that comes while the request waits counts: one the
// commit read before (the rest of the request took longer — a picture
// fetched, a tool server starting) may predate a forget since, so the
// version is read now (-1).
func (mem *Memory) wait(ctx context.Context, gate *notesGate) (int64, bool) {
	select {
	case <-gate.ready:
		return -1, true
	default:
	}
	alone := mem.gated.Add(1) == 1
	if mem.waiting != nil {
		mem.waiting()
	}
	if alone {
		go func() {
			if v, err := mem.store.NotesVersion(ctx, gate.user); err == nil {
				gate.open(v.Changes)
			}
		}()
	}
	defer mem.gated.Add(-1)
	select {
	case <-gate.ready:
		return gate.changes, true
	case <-ctx.Done():
		return 0, false
	}
}

// gate returns the gate of an early call of in, or nil: where the notes'
// version is read from the database, and in's user's notes are put in
// requests.
func (mem *Memory) gate(in Inbound) *notesGate {
	if mem == nil || !mem.store.SharedNotes() {
		return nil
	}
	user := memoryUserOf(in)
	if user == "" {
		return nil
	}
	if set := mem.Settings(in.Channel, user); !set.Enabled || set.InjectTokens <= 0 {
		return nil
	}
	return &notesGate{user: user, changes: -1, ready: make(chan struct{})}
}

// userNotes is a copy of one user's notes, newest first, read after
// version, with the index a ranking needs. It is never changed once made.
type userNotes struct {
	version ledger.NotesVersion
	notes   []ledger.Note
	// tooMany: the user keeps more than noteCacheNotes; notes is empty
	// and the database is searched.
	tooMany bool
	// words: for each word, its idf and the notes holding it, each with
	// the word's BM25 weight there — all of a ranking that does not
	// depend on the query, computed once.
	words map[string]*wordPostings
	size  int64
}

type wordPostings struct {
	idf      float64
	postings []posting
}

type posting struct {
	note   int32
	count  int32
	weight float64 // tf·(k1+1) / (tf + k1·(1 − b + b·len/avgLen))
}

// notePostingSize is a posting's bytes, and noteOverhead what a note and
// its index entry take besides their texts, roughly.
const (
	notePostingSize = int64(unsafe.Sizeof(posting{}))
	noteOverhead    = int64(unsafe.Sizeof(ledger.Note{})) + 4
)

// newUserNotes indexes notes (newest first) read after version v.
func newUserNotes(v ledger.NotesVersion, notes []ledger.Note) *userNotes {
	u := &userNotes{version: v, notes: notes, words: map[string]*wordPostings{}, size: 256}
	length := make([]int, len(notes))
	total := 0
	for i, n := range notes {
		words := ledger.NoteWords(n.Text)
		length[i] = len(words)
		total += len(words)
		u.size += noteOverhead + int64(len(n.Text)+len(n.UserKey)+len(n.Author)+len(n.ConversationID)+len(n.CallKey))
		for _, w := range words {
			if ledger.IsStopWord(w) {
				continue
			}
			wp := u.words[w]
			if wp == nil {
				wp = &wordPostings{}
				u.words[w] = wp
				u.size += int64(len(w)) + 96 // the map's entry and its postings
			}
			if k := len(wp.postings) - 1; k >= 0 && wp.postings[k].note == int32(i) {
				wp.postings[k].count++
				continue
			}
			wp.postings = append(wp.postings, posting{note: int32(i), count: 1})
			u.size += notePostingSize
		}
	}
	if len(notes) == 0 {
		return u
	}
	avg, n := float64(total)/float64(len(notes)), float64(len(notes))
	for _, wp := range u.words {
		// FTS5's idf: log((N - n + 0.5) / (n + 0.5)), and a word in
		// more than half of the notes still counts a little.
		wp.idf = math.Log((n - float64(len(wp.postings)) + 0.5) / (float64(len(wp.postings)) + 0.5))
		if wp.idf <= 0 {
			wp.idf = 1e-6
		}
		for j := range wp.postings {
			p := &wp.postings[j]
			tf := float64(p.count)
			p.weight = tf * (bm25K1 + 1) / (tf + bm25K1*(1-bm25B+bm25B*float64(length[p.note])/avg))
		}
	}
	return u
}

// notesFor is what a turn's NotesFor would return, from the copy: up to
// limit of the notes sharing a word with query, the best ranked first
// (the newer first among equals), then up to limit of the newest, each
// once. The notes are the copy's own: never to be changed.
func (u *userNotes) notesFor(query string, limit int) []*ledger.Note {
	type scored struct {
		note  int32
		score float64
	}
	var score []float64 // by note, once a word matched
	var hits []scored
	for _, w := range ledger.SearchWords(query) {
		wp := u.words[w]
		if wp == nil {
			continue
		}
		if score == nil {
			score = make([]float64, len(u.notes))
		}
		for _, p := range wp.postings {
			score[p.note] += wp.idf * p.weight
		}
	}
	for i, sc := range score {
		if sc > 0 {
			hits = append(hits, scored{int32(i), sc})
		}
	}
	// notes are newest first: the lower index is the newer note.
	slices.SortFunc(hits, func(a, b scored) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(a.note, b.note)
	})
	out := make([]*ledger.Note, 0, min(len(hits), limit)+min(len(u.notes), limit))
	for _, h := range hits[:min(len(hits), limit)] {
		score[h.note] = -1 // taken
		out = append(out, &u.notes[h.note])
	}
	for i := range min(len(u.notes), limit) {
		if score == nil || score[i] >= 0 {
			out = append(out, &u.notes[i])
		}
	}
	return out
}

// notesFor returns the notes a turn of user carries (userNotes.notesFor)
// from the user's kept copy when it is current, else reads the notes
// (all of them, or the database's search for a user with more than
// noteCacheNotes) and keeps them. Current is of version read when given
// (notesGate's), else of the version read now.
func (mem *Memory) notesFor(ctx context.Context, user, query string, limit int, read *ledger.NotesVersion) ([]*ledger.Note, error) {
	var v ledger.NotesVersion
	if read != nil {
		v = *read
	} else {
		var err error
		if v, err = mem.store.NotesVersion(ctx, user); err != nil {
			return nil, err
		}
	}
	u, ok := mem.cache.get(user, v)
	if !ok {
		// Read after v: a write landing meanwhile changes the version,
		// and the next turn reads them again.
		all, err := mem.store.Notes(ctx, user, noteCacheNotes+1)
		if err != nil {
			return nil, err
		}
		if len(all) > noteCacheNotes {
			u = &userNotes{version: v, tooMany: true, size: 256}
		} else {
			u = newUserNotes(v, all)
		}
		mem.cache.put(user, u)
	}
	if u.tooMany {
		found, err := mem.store.NotesFor(ctx, user, query, limit)
		out := make([]*ledger.Note, len(found))
		for i := range found {
			out[i] = &found[i]
		}
		return out, err
	}
	return u.notesFor(query, limit), nil
}
