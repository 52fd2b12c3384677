package telegram

// Albums. Telegram delivers an album (a media group: pictures, videos or
// files sent together) as one update per item, sharing a media_group_id,
// with the caption on one of them. People mean one message by it, so the
// bot gathers the parts of one sender's album in one chat and topic into
// one stored message — every picture, and the caption — answered by one
// turn whatever the busy mode.
//
// The first part takes its place in its chat's queue at once (a message
// sent after the album stays after it) and waits there for the others:
// until AlbumWait has passed with no new part, or MaxAlbumGather since the
// first, or ten parts (Telegram's largest album) have come. A part that
// comes later than that is a message of its own.
//
// No part is confirmed before the album is stored, and all of them are
// confirmed together, in one offset state: while the album gathers its
// parts are pending like any update not stored yet (held in the stored
// state when polling moves past them), so a stop or a crash in the middle
// loses none — Telegram, or the stored state, gives them back and they are
// gathered again. The stored message's client id is its lowest message
// id's, so an album given back after it was stored is recognised by the
// ledger and runs nothing twice. A webhook's parts are each answered once
// the album is stored.

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

// Gathering an album's parts.
const (
	// DefaultAlbumWait is Options.AlbumWait's default: how long after an
	// album's latest part the bot waits for another. Telegram sends an
	// album's parts within a few tens of milliseconds of each other.
	DefaultAlbumWait = 800 * time.Millisecond
	// MaxAlbumGather bounds the wait from an album's first part, however
	// its parts trickle in.
	MaxAlbumGather = 10 * time.Second
	// maxAlbumParts is Telegram's largest album: one that has them all is
	// taken at once.
	maxAlbumParts = 10
)

// albumID names an album being gathered: one sender's, in one chat and
// topic (two people in a group may send albums at once).
type albumID struct {
	chat   int64
	thread int
	from   int64
	group  string // media_group_id
}

// album is one album being gathered.
type album struct {
	parts       []albumPart
	first, last time.Time     // when its first and latest part came
	more        chan struct{} // a token when a part is added
}

// albumPart is one update of an album: its message, end (which ends its
// span and settles its webhook request), and since when storing it has
// failed, if it has.
type albumPart struct {
	u    update
	m    *message
	end  func(processed bool)
	held time.Time
}

// albums are the albums being gathered, until their turn in their chat's
// queue comes and they are taken.
type albums struct {
	mu   sync.Mutex
	open map[albumID]*album
}

// gather adds an album's part to its album. The first part of an album
// queues the album on its chat's queue, where it waits for the rest
// (collect) and is then stored as one message (run).
func (b *Bot) gather(ctx context.Context, p albumPart, key string, offsets *offsetTracker) {
	id := albumID{chat: p.m.Chat.ID, thread: p.m.thread, from: p.m.From.ID, group: p.m.MediaGroupID}
	now := b.opts.Now()
	b.albums.mu.Lock()
	if al := b.albums.open[id]; al != nil {
		al.parts = append(al.parts, p)
		al.last = now
		select {
		case al.more <- struct{}{}:
		default:
		}
		b.albums.mu.Unlock()
		return
	}
	if b.albums.open == nil {
		b.albums.open = map[albumID]*album{}
	}
	al := &album{parts: []albumPart{p}, first: now, last: now, more: make(chan struct{}, 1)}
	b.albums.open[id] = al
	b.albums.mu.Unlock()
	b.inflight.Add(1)
	b.queue.submit(key, func() {
		defer b.inflight.Done()
		parts, ok := b.collect(ctx, id, al)
		ids, ends := make([]int, len(parts)), make([]func(bool), len(parts))
		w := work{m: albumMessage(parts), updates: make([]update, len(parts))}
		for i, p := range parts {
			ids[i], ends[i], w.updates[i] = p.u.UpdateID, p.end, p.u
			if !p.held.IsZero() && (w.since.IsZero() || p.held.Before(w.since)) {
				w.since = p.held
			}
		}
		done := b.confirmer(ctx, offsets, ids, ends)
		if !ok {
			done(false) // stopping: the parts come again
			return
		}
		b.run(ctx, w, key, offsets, done)
	})
}

// collect waits for the rest of album al, and takes it from the albums
// being gathered: a part that comes after this starts another. It
// returns the parts, lowest message id first, and false when the bot
// stops taking updates (or polling stops) first.
func (b *Bot) collect(ctx context.Context, id albumID, al *album) ([]albumPart, bool) {
	ok := true
	for {
		b.albums.mu.Lock()
		n, first, last := len(al.parts), al.first, al.last
		b.albums.mu.Unlock()
		if n >= maxAlbumParts {
			break
		}
		now := b.opts.Now()
		d := min(last.Add(b.opts.AlbumWait).Sub(now), first.Add(MaxAlbumGather).Sub(now))
		if d <= 0 {
			break
		}
		select {
		case <-al.more: // a part came: wait from it
			continue
		case <-b.opts.After(d):
			continue // due, unless a part came meanwhile
		case <-ctx.Done():
			ok = false
		case <-b.stopping:
			ok = false
		}
		break
	}
	b.albums.mu.Lock()
	delete(b.albums.open, id)
	parts := al.parts
	b.albums.mu.Unlock()
	slices.SortFunc(parts, func(x, y albumPart) int { return x.m.MessageID - y.m.MessageID })
	return parts, ok
}

// albumMessage is the message an album's parts (lowest message id first)
// make: the first part's, with every part's caption (most albums have one)
// and the reply or quote any of them carries; its album is the parts.
func albumMessage(parts []albumPart) *message {
	lead := *parts[0].m.Message
	lead.Caption, lead.CaptionEntities = "", nil // mentions are looked for in each part (addressed)
	m := &message{Message: &lead, thread: parts[0].m.thread}
	var captions []string
	for _, p := range parts {
		m.album = append(m.album, p.m)
		if c := strings.TrimSpace(p.m.Caption); c != "" {
			captions = append(captions, c)
		}
		if lead.ReplyToMessage == nil && p.m.ReplyToMessage != nil {
			lead.ReplyToMessage = p.m.ReplyToMessage
		}
		if m.quote == "" {
			m.quote = p.m.quote
		}
	}
	lead.Caption = strings.Join(captions, "\n\n")
	return m
}

// readAlbum reads an album's parts into one message: every part's
// attachments, the text read from its files and voice before the caption
// (text, the album's captions with the bot's mention taken out), and each
// notice once.
func (b *Bot) readAlbum(ctx context.Context, m *message, key, text string) inbound {
	var out inbound
	var read, transcripts []string
	told := map[string]bool{}
	for _, p := range m.album {
		r := b.readMedia(ctx, p, key, text)
		out.atts = append(out.atts, r.atts...)
		out.spoken = out.spoken || r.spoken
		for _, n := range r.notices {
			if !told[n] {
				told[n] = true
				out.notices = append(out.notices, n)
			}
		}
		if r.transcript != "" {
			transcripts = append(transcripts, r.transcript)
		}
		// A file's or a voice's text comes before the caption readMedia
		// was given (which it keeps as it is for a picture).
		switch extra := strings.TrimSuffix(r.text, "\n\n"+text); {
		case r.text == text || r.text == "":
		case text == "":
			read = append(read, r.text)
		case extra != r.text:
			read = append(read, extra)
		}
	}
	out.transcript = strings.Join(transcripts, "\n\n")
	if len(read) > 0 || len(out.atts) > 0 || !out.spoken {
		// Audio that could not be heard, with nothing else read, stores
		// nothing, its caption neither (Bot.audio).
		read = append(read, text)
	}
	out.text = strings.TrimSpace(strings.Join(read, "\n\n"))
	return out
}
