package telegram

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/chatgate/chatgate/bots/telegram/tgformat"
	"github.com/chatgate/chatgate/sessions"
)

// Streaming modes (Options.Streaming): how a reply shows while the model
// writes it.
const (
	// StreamAuto drafts in private chats and edits in groups, and edits
	// in private chats too once the Bot API refused drafts.
	StreamAuto = "auto"
	// StreamDraft drafts in private chats (groups get no preview); after
	// a refusal it edits, as auto does.
	StreamDraft = "draft"
	// StreamEdits sends a first message and edits it, everywhere.
	StreamEdits = "edits"
	// StreamOff shows "typing…" until the whole reply is sent.
	StreamOff = "off"
)

// How often a chat's preview may change: Telegram allows about one
// message a second per chat and twenty a minute per group.
const (
	privateEvery = time.Second
	groupEvery   = 3 * time.Second
)

// How previews are made.
const (
	methodDraft = "sendMessageDraft"
	methodEdit  = "editMessageText"
	// previewFailures ends previews after this many failed calls in a row
	// (429s aside): the final reply goes out as it would without them.
	previewFailures = 3
)

// previewText is what a preview shows of the reply written so far — as
// much as fits in its first message, converted as the final reply will be
// (an unclosed code fence shows as code) — and the parse mode to send it
// with. plain asks for the text without markup: Telegram refused the
// markup of an earlier preview.
func (b *Bot) previewText(soFar string, plain bool) (text, parseMode string) {
	return previewOf(b.opts.Format, soFar, plain)
}

func previewOf(format, soFar string, plain bool) (text, parseMode string) {
	p := partsOf(format, soFar)[0]
	if format == FormatPlain || plain {
		return p.Plain, ""
	}
	return p.HTML, tgbotapi.ModeHTML
}

// finalParts are the messages a reply is sent as (their HTML and plain
// forms); a streamed reply's first part replaces its preview.
func (b *Bot) finalParts(text string) []tgformat.Part { return partsOf(b.opts.Format, text) }

func partsOf(format, text string) []tgformat.Part {
	if format == FormatPlain {
		return plainParts(text)
	}
	return tgformat.Split(text, MaxMessageUnits)
}

// stream shows one turn's reply while the model writes it: drafts, or a
// message edited as the text grows, at most once per interval per chat.
// Only the turn's lead message gets deltas, so a burst streams once. The
// worker starts with the first delta; end stops it before the final reply
// is delivered.
type stream struct {
	b    *Bot
	to   place // the chat and topic the turn answers
	key  string
	lead string // the client id of the message the deltas answer
	// quote goes above the text in every preview, as in the reply: the
	// transcript of the voice note answered (Bot.quoteOf).
	quote   string
	replyTo int
	draftID int
	pace    *pacer
	ctx     context.Context // ends with end: cuts a wait between previews
	cancel  context.CancelFunc
	kick    chan struct{}
	exited  chan struct{}

	mu      sync.Mutex
	soFar   strings.Builder
	tools   []toolLine // the turn's tool calls (stream.tool)
	started bool
	ended   bool

	// Owned by the worker until it exited, then by end's caller.
	mode     string // methodDraft or methodEdit
	shown    string // the text the preview shows
	msgID    int    // the preview message (edits)
	failures int
	off      bool // previews given up
	plain    bool // previews without markup: Telegram refused it
	// delivered is set once the reply went into the preview message: its
	// record is cleared after the delivery is marked.
	delivered bool
}

// newStream returns the stream for m's reply, or nil when this chat gets
// no preview.
func (b *Bot) newStream(m *message, key string) *stream {
	mode := b.opts.Streaming
	private := m.Chat.IsPrivate()
	var method string
	switch {
	case mode == StreamOff:
		return nil
	case mode == StreamEdits || !private:
		if mode == StreamDraft {
			return nil // drafts exist in private chats only
		}
		method = methodEdit
	case b.draftsRefused.Load():
		method = methodEdit
	default:
		method = methodDraft
	}
	every := privateEvery
	if !private {
		every = groupEvery
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &stream{b: b, to: m.to(), key: key, lead: clientMsgID(m.Chat.ID, m.MessageID), replyTo: m.MessageID,
		draftID: m.MessageID, pace: b.pacerFor(m.Chat.ID, every), ctx: ctx, cancel: cancel, mode: method,
		kick: make(chan struct{}, 1), exited: make(chan struct{})}
}

// delta takes a piece of the reply. It never waits for Telegram: the
// worker shows the text so far when the pace allows.
func (s *stream) delta(d string) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.soFar.WriteString(d)
	if !s.started {
		s.started = true
		go s.run()
	}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// run shows the text so far whenever it changed and the chat's pace
// allows, until end.
func (s *stream) run() {
	defer close(s.exited)
	for {
		select {
		case <-s.kick:
		case <-s.ctx.Done():
			return
		}
		for !s.off && s.ctx.Err() == nil {
			preview, parseMode := s.preview()
			if preview == s.shown || strings.TrimSpace(preview) == "" {
				break
			}
			if wait := s.pace.take(s.b.opts.Now()); wait > 0 {
				if s.b.opts.Sleep(s.ctx, wait) != nil {
					return
				}
				continue // more may have come meanwhile
			}
			s.show(preview, parseMode)
		}
	}
}

// show makes the preview show text: a draft, or the preview message sent
// or edited.
func (s *stream) show(text, parseMode string) {
	b := s.b
	params := s.to.params() // a new draft or message goes to the topic
	params["text"] = text
	params.AddNonEmpty("parse_mode", parseMode)
	var err error
	switch {
	case s.mode == methodDraft:
		params.AddNonZero("draft_id", s.draftID)
		if _, err = b.api.MakeRequest(methodDraft, params); s.leftTopic(err) {
			return
		}
		if err != nil && draftRefused(err) {
			b.refuseDrafts(err)
			s.mode = methodEdit // at once: the refused call showed nothing
			s.pace.abort()
			return
		}
		var apiErr *tgbotapi.Error
		if isClientError(err) && !(parseMode != "" && errors.As(err, &apiErr) && refusedEntities(apiErr)) {
			// The server has drafts but will not take this one (not for
			// this bot, or not in this chat): this reply shows by edits
			// instead, at once; the next tries drafts again.
			b.warnOnce(methodDraft, err)
			s.mode = methodEdit
			s.pace.abort()
			return
		}
	case s.msgID == 0:
		params.AddNonZero("reply_to_message_id", s.replyTo)
		params.AddBool("allow_sending_without_reply", true)
		var resp *tgbotapi.APIResponse
		if resp, err = b.api.MakeRequest("sendMessage", params); s.leftTopic(err) {
			return
		}
		if err == nil {
			var sent tgbotapi.Message
			if err = json.Unmarshal(resp.Result, &sent); err == nil {
				s.msgID = sent.MessageID
				b.recordPreview(s.key, previewRecord{Chat: s.to.chat, Message: s.msgID, For: s.lead})
			}
		}
	default:
		delete(params, "message_thread_id") // an edit names the message alone
		params.AddNonZero("message_id", s.msgID)
		if _, err = b.api.MakeRequest(methodEdit, params); notModified(err) {
			err = nil
		}
	}
	s.pace.done(b.opts.Now(), err) // a 429 slows the chat down as Telegram says
	if err == nil {
		s.shown, s.failures = text, 0
		return
	}
	var apiErr *tgbotapi.Error
	if errors.As(err, &apiErr) && apiErr.RetryAfter > 0 {
		return // the text waits; nothing is lost
	}
	if parseMode != "" && errors.As(err, &apiErr) && refusedEntities(apiErr) {
		b.warnParse(s.to.chat, err)
		s.plain = true // the next preview goes without markup
		return
	}
	b.warnOnce(s.mode, err)
	s.failures++
	if s.failures >= previewFailures || (s.mode == methodEdit && isClientError(err)) {
		s.off = true // the final reply goes out as without previews
	}
}

// leftTopic reports whether err says the topic the preview was to go to
// was closed or deleted. Then the previews, like the reply, go to the
// General topic, the next one at once.
func (s *stream) leftTopic(err error) bool {
	if s.to.thread == 0 || !topicGone(err) {
		return false
	}
	s.to.thread = s.b.toGeneral(s.to, "the reply's preview", err).thread
	s.pace.abort()
	return true
}

// end stops the previews: the turn is over. It waits for a call in
// flight, so that nothing of the stream reaches Telegram after it.
func (s *stream) end() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.ended = true
	started := s.started
	s.mu.Unlock()
	s.cancel()
	if started {
		<-s.exited
	}
}

// release lets go of the chat's pacer once the reply is delivered and
// marked, and forgets the preview message the reply went into. (Cleared
// after the mark, a crash between the two costs no duplicate: the
// delivery done again edits the message to the text it has.)
func (s *stream) release() {
	if s == nil {
		return
	}
	s.b.releasePacer(s.to.chat)
	if s.delivered {
		s.b.clearPreview(s.key, s.to.chat, s.msgID)
	}
}

// dropPreview deletes the preview message of a turn whose reply will not
// go into it: a newer message cut the turn, and the next turn's reply is
// sent as a message of its own. A failed delete is logged once; the
// preview then stays as it was.
func (b *Bot) dropPreview(s *stream) {
	if s == nil || s.msgID == 0 {
		return
	}
	if b.deletePreview(s.to.chat, s.msgID) {
		b.clearPreview(s.key, s.to.chat, s.msgID)
	}
}

// deletePreview deletes preview message msgID, reporting whether it is
// gone; a failure is logged once.
func (b *Bot) deletePreview(chatID int64, msgID int) bool {
	params := tgbotapi.Params{"chat_id": strconv.FormatInt(chatID, 10)}
	params.AddNonZero("message_id", msgID)
	if _, err := b.api.MakeRequest("deleteMessage", params); err != nil {
		b.warnOnce("deleteMessage", err)
		return false
	}
	return true
}

// deliverReply sends a live turn's reply: into its preview message when
// the stream made one, else as today's messages. Call it after end.
func (b *Bot) deliverReply(ctx context.Context, s *stream, to place, text string, replyTo int) (string, error) {
	if s == nil || s.msgID == 0 {
		return b.send(ctx, to, text, replyTo)
	}
	ref, err := b.finishPreview(ctx, to, s.msgID, s.shown, s.pace, text, replyTo)
	s.delivered = err == nil
	return ref, err
}

// finishPreview turns preview message msgID, showing shown, into the
// reply: its first part by an edit (when pace, the chat's pacer, allows),
// the rest as new messages. An edit that fails for good (the message was
// deleted, or is too old, or 429s went on through every retry) sends the
// whole reply as new messages instead, and the preview, half a reply, is
// deleted: the reply is never lost to a preview.
func (b *Bot) finishPreview(ctx context.Context, to place, msgID int, shown string, pace *pacer, text string, replyTo int) (string, error) {
	ctx = context.WithoutCancel(ctx) // a reply is delivered even while stopping
	parts := b.finalParts(text)
	html := b.opts.Format != FormatPlain
	first := parts[0].Plain
	if html {
		first = parts[0].HTML
	}
	if first != shown {
		if err := b.editFinal(ctx, to.chat, msgID, parts[0], html, pace); err != nil {
			b.log.Warn("telegram: the preview could not be turned into the reply; sending it anew",
				slog.Int64("chat", to.chat), slog.String("error", b.redact(err)))
			ref, err := b.send(ctx, to, text, replyTo)
			if err == nil {
				b.deletePreview(to.chat, msgID)
			}
			return ref, err
		}
	}
	ids := []string{strconv.Itoa(msgID)}
	if len(parts) > 1 {
		ref, err := b.sendParts(ctx, to, parts[1:], html, 0)
		if ref != "" {
			ids = append(ids, ref)
		}
		if err != nil {
			return strings.Join(ids, ","), err
		}
	}
	return strings.Join(ids, ","), nil
}

// editFinal edits msgID to part (as HTML when html is set), waiting out
// 429s and retrying other failures with backoff, at the pace of pace (nil:
// at once); an edit that would change nothing succeeded. Markup Telegram
// refuses is replaced by the part's plain text at once.
func (b *Bot) editFinal(ctx context.Context, chatID int64, msgID int, part tgformat.Part, html bool, pace *pacer) error {
	params := tgbotapi.Params{"chat_id": strconv.FormatInt(chatID, 10), "text": part.Plain}
	if html {
		params["text"], params["parse_mode"] = part.HTML, tgbotapi.ModeHTML
	}
	params.AddNonZero("message_id", msgID)
	if pace == nil {
		pace = &pacer{every: 0}
	}
	var err error
	for attempt := 0; attempt < 6; attempt++ {
		for {
			wait := pace.take(b.opts.Now())
			if wait <= 0 {
				break
			}
			if err := b.opts.Sleep(ctx, wait); err != nil {
				return err
			}
		}
		_, err = b.api.MakeRequest(methodEdit, params)
		pace.done(b.opts.Now(), err)
		if err == nil || notModified(err) {
			return nil
		}
		var apiErr *tgbotapi.Error
		switch {
		case errors.As(err, &apiErr) && params["parse_mode"] != "" && refusedEntities(apiErr):
			b.warnParse(chatID, err)
			params["text"] = part.Plain
			delete(params, "parse_mode")
		case errors.As(err, &apiErr) && apiErr.RetryAfter > 0:
			// The pacer waits it out.
		case isClientError(err):
			return err // deleted, too old, …: it will not get better
		default:
			pace.delay(b.opts.Now().Add(time.Duration(1<<attempt) * 500 * time.Millisecond))
		}
	}
	return err
}

// pacer spaces the preview calls of one chat — of every reply streaming
// into it at once — at least every apart, each counted from the end of
// the call before, and as far apart as a 429's retry_after says.
type pacer struct {
	users int // streams using it; guarded by Bot.mu

	mu       sync.Mutex
	every    time.Duration
	inflight bool
	next     time.Time
}

// take returns how long to wait before the chat's next call; zero means
// call now, and the caller must report the call's end with done.
func (p *pacer) take(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.inflight:
		return max(p.every, time.Millisecond) // another stream's call: look again after a while
	case now.Before(p.next):
		return p.next.Sub(now)
	}
	p.inflight = true
	return 0
}

// done ends a call taken at take: the next comes every later, or when a
// 429 said.
func (p *pacer) done(now time.Time, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inflight = false
	wait := p.every
	var apiErr *tgbotapi.Error
	if errors.As(err, &apiErr) && apiErr.RetryAfter > 0 {
		wait = max(wait, time.Duration(apiErr.RetryAfter)*time.Second)
	}
	if t := now.Add(wait); t.After(p.next) {
		p.next = t
	}
}

// delay puts the next call off until at least t.
func (p *pacer) delay(t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t.After(p.next) {
		p.next = t
	}
}

// abort ends a call taken at take that did not count: the next may
// come at once.
func (p *pacer) abort() {
	p.mu.Lock()
	p.inflight = false
	p.mu.Unlock()
}

// pacerFor returns chat's pacer, shared by the replies streaming into it;
// releasePacer lets go of it once the reply is delivered.
func (b *Bot) pacerFor(chatID int64, every time.Duration) *pacer {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pacers == nil {
		b.pacers = map[int64]*pacer{}
	}
	p := b.pacers[chatID]
	if p == nil {
		p = &pacer{every: every}
		b.pacers[chatID] = p
	}
	p.users++
	return p
}

func (b *Bot) releasePacer(chatID int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.pacers[chatID]; p != nil {
		if p.users--; p.users <= 0 {
			delete(b.pacers, chatID)
		}
	}
}

// draftRefused reports whether the Bot API said it has no
// sendMessageDraft: an older or self-hosted server answers 404 Not Found,
// or a 400 naming the method.
func draftRefused(err error) bool {
	var apiErr *tgbotapi.Error
	if !errors.As(err, &apiErr) {
		return false
	}
	if apiErr.Code == http.StatusNotFound {
		return true
	}
	msg := strings.ToLower(apiErr.Message)
	return apiErr.Code == http.StatusBadRequest && strings.Contains(msg, "method") &&
		(strings.Contains(msg, "not found") || strings.Contains(msg, "unknown") || strings.Contains(msg, "not supported") || strings.Contains(msg, "not available"))
}

// refuseDrafts remembers that this bot's Bot API has no drafts: its
// previews are edits from now on. Logged once.
func (b *Bot) refuseDrafts(err error) {
	if !b.draftsRefused.Swap(true) {
		b.log.Info("telegram: the Bot API refused sendMessageDraft; previews are edited messages from now on",
			slog.String("error", b.redact(err)))
	}
}

func notModified(err error) bool {
	var apiErr *tgbotapi.Error
	return errors.As(err, &apiErr) && apiErr.Code == http.StatusBadRequest && strings.Contains(apiErr.Message, "message is not modified")
}

// isClientError reports a 4xx other than 429: a call that will not get
// better by trying again.
func isClientError(err error) bool {
	var apiErr *tgbotapi.Error
	return errors.As(err, &apiErr) && apiErr.Code >= 400 && apiErr.Code < 500 && apiErr.Code != http.StatusTooManyRequests
}

// previewRecord is a preview message whose reply was not delivered yet,
// stored per session key so that the reply delivered after a restart
// replaces it instead of leaving half a text in the chat.
type previewRecord struct {
	Chat    int64  `json:"chat"`
	Message int    `json:"message"`
	For     string `json:"for"` // the client id of the message it answers
}

func (b *Bot) previewKey(key string) string { return b.stateKey("preview:" + key) }

// recordPreview stores the key's preview message. A failure costs only
// the clean-up after a restart: it is logged once.
func (b *Bot) recordPreview(key string, r previewRecord) {
	v, _ := json.Marshal(r)
	b.previewMu.Lock()
	defer b.previewMu.Unlock()
	if err := b.sess.SetChannelState(context.Background(), b.previewKey(key), string(v)); err != nil {
		b.warnOnce("store preview", err)
	}
}

// clearPreview forgets the key's preview record once message msgID of
// chat became its reply — only if the record still names that message:
// the key's next reply may have started streaming into a preview of its
// own meanwhile, and that one's record must stay.
func (b *Bot) clearPreview(key string, chat int64, msgID int) {
	b.previewMu.Lock()
	defer b.previewMu.Unlock()
	v, err := b.sess.ChannelState(context.Background(), b.previewKey(key))
	var r previewRecord
	if err == nil && (v == "" || json.Unmarshal([]byte(v), &r) != nil || r.Chat != chat || r.Message != msgID) {
		return
	}
	if err := b.sess.SetChannelState(context.Background(), b.previewKey(key), ""); err != nil {
		b.warnOnce("store preview", err)
	}
}

// storedPreview returns the preview message a stored reply replaces: the
// key's, when it was made for one of the messages the reply answers.
func (b *Bot) storedPreview(ctx context.Context, d sessions.Delivery, chat int64) (previewRecord, bool) {
	v, err := b.sess.ChannelState(ctx, b.previewKey(d.SessionKey))
	var r previewRecord
	if err != nil || v == "" || json.Unmarshal([]byte(v), &r) != nil {
		return r, false
	}
	return r, r.Chat == chat && r.Message != 0 && slices.Contains(d.Reply.Covers, r.For)
}

// deliverStoredText sends a stored reply: into the preview message a
// stream of its turn left (its process stopped before the reply was
// sent), else as new messages.
func (b *Bot) deliverStoredText(ctx context.Context, d sessions.Delivery, to place, text string, replyTo int) (string, error) {
	r, ok := b.storedPreview(ctx, d, to.chat)
	if !ok {
		return b.send(ctx, to, text, replyTo)
	}
	ref, err := b.finishPreview(ctx, to, r.Message, "", nil, text, replyTo)
	if err == nil {
		b.clearPreview(d.SessionKey, to.chat, r.Message)
	}
	return ref, err
}
