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

// peek returns user's copy, whatever its version.
func (c *noteCache) peek(user string) (*userNotes, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Get(user)
}

// drop forgets user's copy.
func (c *noteCache) drop(user string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Remove(user)
}

// checkedAtCommit reports whether an early call of in may take its
// user's notes from a kept copy, checked when its message's commit lands:
// where other processes write notes, and in's user's notes are put in
// requests.
func (mem *Memory) checkedAtCommit(in Inbound) bool {
	if mem == nil || !mem.store.SharedNotes() {
		return false
	}
	user := memoryUserOf(in)
	if user == "" {
		return false
	}
	set := mem.Settings(in.Channel, user)
	return set.Enabled && set.InjectTokens > 0
}

// notesUse is what notes an early call's request carries: a kept copy of
// user's notes whose version (changes) is unchecked, or none to check.
type notesUse struct {
	user      string
	changes   int64
	unchecked bool
}

// current reports whether the notes used are those of the version its
// message's commit read (changes; nil: none read), and drops a copy
// found out of date.
func (mem *Memory) current(use notesUse, changes *int64) bool {
	if !use.unchecked || changes == nil || *changes == use.changes {
		return true
	}
	mem.cache.drop(use.user)
	return false
}

// put keeps u, dropping the least recently used copies over the bound.
func (c *noteCache) put(user string, u *userNotes) {
	if u.size > c.max/8 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Remove(user) // an older copy: its bytes are taken off
	c.lru.Add(user, u)
	c.bytes += u.size
	for c.bytes > c.max {
		c.lru.RemoveOldest()
	}
}

// userNotes is a copy of one user's notes, newest first, read after
// version, with the index a ranking needs. It is never changed once made.
type userNotes struct {
	version ledger.NotesVersion
	notes   []ledger.Note
	// tooMany: the user keeps more than noteCacheNotes; notes is empty
	// and the database is searched.
	tooMany bool
	// postings: for each word, the notes holding it (index in notes) and
	// how often; length: each note's words; avgLen their mean.
	postings map[string][]posting
	length   []int32
	avgLen   float64
	size     int64
}

type posting struct {
	note  int32
	count int32
}

// notePostingSize is a posting's bytes, and noteOverhead what a note and
// its index entry take besides their texts, roughly.
const (
	notePostingSize = int64(unsafe.Sizeof(posting{}))
	noteOverhead    = int64(unsafe.Sizeof(ledger.Note{})) + 4
)

// newUserNotes indexes notes (newest first) read after version v.
func newUserNotes(v ledger.NotesVersion, notes []ledger.Note) *userNotes {
	u := &userNotes{version: v, notes: notes, postings: map[string][]posting{}, length: make([]int32, len(notes)),
		size: 256}
	total := 0
	for i, n := range notes {
		words := ledger.NoteWords(n.Text)
		u.length[i] = int32(len(words))
		total += len(words)
		u.size += noteOverhead + int64(len(n.Text)+len(n.UserKey)+len(n.Author)+len(n.ConversationID)+len(n.CallKey))
		for _, w := range words {
			if ledger.IsStopWord(w) {
				continue
			}
			ps := u.postings[w]
			if k := len(ps) - 1; k >= 0 && ps[k].note == int32(i) {
				ps[k].count++
				continue
			}
			if ps == nil {
				u.size += int64(len(w)) + 48 // the map's entry
			}
			u.postings[w] = append(ps, posting{note: int32(i), count: 1})
			u.size += notePostingSize
		}
	}
	if len(notes) > 0 {
		u.avgLen = float64(total) / float64(len(notes))
	}
	return u
}

// notesFor is what a turn's NotesFor would return, from the copy: up to
// limit of the notes sharing a word with query, the best ranked first
// (the newer first among equals), then up to limit of the newest, each
// once.
func (u *userNotes) notesFor(query string, limit int) []ledger.Note {
	n := float64(len(u.notes))
	type scored struct {
		note  int32
		score float64
	}
	var hits []scored
	at := map[int32]int{}
	for _, w := range ledger.SearchWords(query) {
		ps := u.postings[w]
		if len(ps) == 0 {
			continue
		}
		// FTS5's idf: log((N - n + 0.5) / (n + 0.5)), and a word in
		// more than half of the notes still counts a little.
		idf := math.Log((n - float64(len(ps)) + 0.5) / (float64(len(ps)) + 0.5))
		if idf <= 0 {
			idf = 1e-6
		}
		for _, p := range ps {
			tf := float64(p.count)
			s := idf * tf * (bm25K1 + 1) / (tf + bm25K1*(1-bm25B+bm25B*float64(u.length[p.note])/u.avgLen))
			if i, ok := at[p.note]; ok {
				hits[i].score += s
			} else {
				at[p.note] = len(hits)
				hits = append(hits, scored{p.note, s})
			}
		}
	}
	// notes are newest first: the lower index is the newer note.
	slices.SortFunc(hits, func(a, b scored) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(a.note, b.note)
	})
	out := make([]ledger.Note, 0, min(len(hits), limit)+min(len(u.notes), limit))
	seen := make(map[int32]bool, limit)
	for _, h := range hits[:min(len(hits), limit)] {
		seen[h.note] = true
		out = append(out, u.notes[h.note])
	}
	for i := range min(len(u.notes), limit) {
		if !seen[int32(i)] {
			out = append(out, u.notes[i])
		}
	}
	return out
}

// notesFor returns the notes a turn of user carries (userNotes.notesFor)
// from the user's kept copy when it is current, else reads the notes
// (all of them, or the database's search for a user with more than
// noteCacheNotes) and keeps them.
//
// With use (an early call's) on a store other processes write, a kept
// copy is taken without reading the version: use records the copy's, and
// the early call checks it against the version its message's commit read
// (earlyCall.checkNotes), so that a turn pays no round trip of its own.
func (mem *Memory) notesFor(ctx context.Context, user, query string, limit int, use *notesUse) ([]ledger.Note, error) {
	if use != nil && mem.store.SharedNotes() {
		if u, ok := mem.cache.peek(user); ok && !u.tooMany {
			*use = notesUse{user: user, changes: u.version.Changes, unchecked: true}
			return u.notesFor(query, limit), nil
		}
	}
	v, err := mem.store.NotesVersion(ctx, user)
	if err != nil {
		return nil, err
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
		return mem.store.NotesFor(ctx, user, query, limit)
	}
	return u.notesFor(query, limit), nil
}
