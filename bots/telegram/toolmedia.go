package telegram

// Media from tools, delivered with their turn's reply: a picture as a
// photo, an audio clip as audio, anything else as a document, several of a
// kind as an album (sendMediaGroup: Telegram mixes no documents or audio
// with other media, so each kind goes in albums of its own, up to 10
// items each). They go before the reply's text, each marked delivered
// (MediaDeliveries.MarkMediaDelivered) as soon as Telegram took it, and
// the turn is marked delivered after the text: a delivery done again (a
// restart, a repeated update, the recovery pass) skips every item marked.
// Unlike the text, a file has no crash window: it is claimed before its
// request goes, and a claim a crash left is not sent again (sendMedia).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
	"github.com/google/uuid"

	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// MediaDeliveries are the media tools returned: read by id to be sent,
// claimed before each send, and marked delivered item by item.
type MediaDeliveries interface {
	ToolMedia(ctx context.Context, id string) (*sessions.MediaFile, error)
	ClaimMediaSend(ctx context.Context, id, claim string) (ledger.MediaClaim, int, error)
	ReleaseMediaSend(ctx context.Context, id, claim string) error
	MarkMediaDelivered(ctx context.Context, id, ref string) error
}

// Telegram's limits on what a bot uploads, and how long an item is
// tried.
const (
	maxPhotoBytes    = 10 << 20 // a larger picture goes as a document
	maxAlbumItems    = 10
	maxAlbumBytes    = 50 << 20 // the files of one request, held in memory while it is sent
	maxUploadAttempt = 5        // requests in one delivery, while none reached Telegram
	// maxMediaClaims is how many deliveries (a turn's, then the
	// recovery pass's, a minute apart) try an item before it is given
	// up, so that the reply's text, which waits for it, goes.
	maxMediaClaims = 3
)

// errMaybeSent is a send whose request went and whose answer never came
// (a timeout, a connection reset): Telegram may have taken it.
var errMaybeSent = errors.New("telegram: the connection broke after the file was sent; it may have arrived")

// photoMimes are the pictures Telegram takes as photos; another picture
// (a GIF, which a photo would freeze; SVG; …) goes as a document.
var photoMimes = map[string]bool{"image/jpeg": true, "image/png": true, "image/webp": true}

// uploadKind is how item m goes: photo, audio or document.
func uploadKind(m sessions.Media) string {
	switch {
	case m.Kind == "image" && photoMimes[m.Mime] && m.Size <= maxPhotoBytes:
		return "photo"
	case m.Kind == "audio":
		return "audio"
	}
	return "document"
}

// sendMedia sends the items of r's media not delivered yet, answering
// replyTo, each kind in order: photos, audio, documents. It returns the
// lines that tell the user of items that may not have reached them (for
// the reply's text) and the first failure; the items sent before it stay
// marked.
//
// Each item is sent at most once: it is claimed in the database before
// its request goes, by this delivery (a token of its own), and marked
// delivered when Telegram took it. A claim found standing by a delivery
// done again (the process died between the request and the mark) or a
// request whose answer was lost is not sent again: the item is marked
// unsure and the text says it may not have arrived. A request Telegram
// surely did not take (it answered with a failure, or was never reached)
// drops the claim, for the next delivery, up to maxMediaClaims of them.
// Storage that fails meanwhile is waited out (mediaDelivery.stored): a
// claim whose answer was lost is made again by the same delivery, which
// finds it its own, and a read, a release or a mark is made again until
// storage answers — so a database blip costs no file, and no claim is
// left standing while the process lives.
func (b *Bot) sendMedia(ctx context.Context, to place, r sessions.Reply, replyTo int) ([]string, error) {
	if r.MediaUnread {
		// Marked delivered now, the reply would never bring them: the
		// delivery is done again later (sessions' recovery), with them.
		return nil, errors.New("telegram: the files of the reply could not be read; it is delivered again later")
	}
	if len(r.Media) == 0 || b.sess.Media == nil {
		return nil, nil
	}
	ctx = context.WithoutCancel(ctx) // delivered even while stopping
	d := &mediaDelivery{b: b, claim: uuid.NewString()}
	var notes []string
	byKind := map[string][]sessions.Media{}
	for _, m := range r.Media {
		switch {
		case !m.Delivered:
			k := uploadKind(m)
			byKind[k] = append(byKind[k], m)
		case m.Failure != "":
			notes = append(notes, b.mediaNote(m, m.Failure)) // marked so by an earlier delivery
		}
	}
	for _, kind := range []string{"photo", "audio", "document"} {
		items := byKind[kind]
		for len(items) > 0 {
			n := albumSize(items)
			if len(items)-n == 1 && n > 2 {
				n-- // no album of one left behind
			}
			more, err := b.sendMediaBatch(ctx, d, &to, kind, items[:n], replyTo)
			notes = append(notes, more...)
			if err != nil {
				return notes, err
			}
			items = items[n:]
		}
	}
	return notes, nil
}

// albumSize is how many of items (the first at least) go in the next
// request: up to maxAlbumItems, and up to maxAlbumBytes in all — an
// album's files are held in memory while it is sent.
func albumSize(items []sessions.Media) int {
	n, bytes := 0, int64(0)
	for n < len(items) && n < maxAlbumItems {
		if n > 0 && bytes+items[n].Size > maxAlbumBytes {
			break
		}
		bytes += items[n].Size
		n++
	}
	return n
}

// mediaNote is the line that tells the user item m may not have reached
// them, and why: Markdown, as the reply's text is, unless replies go as
// plain text.
func (b *Bot) mediaNote(m sessions.Media, failure string) string {
	name := m.Name
	if name == "" {
		name = "a " + map[string]string{"image": "picture", "audio": "audio clip"}[m.Kind]
		if name == "a " {
			name = "a file"
		}
	}
	if b.opts.Format != FormatPlain {
		name = markdownEscape(name)
	}
	if failure == sessions.MediaUnsure {
		return fmt.Sprintf("(%s may not have arrived: sending it was cut off.)", name)
	}
	return fmt.Sprintf("(%s could not be sent.)", name)
}

// markdownEscape escapes the ASCII punctuation of s, so that a name is
// shown as it is in the reply's Markdown.
func markdownEscape(s string) string {
	var out strings.Builder
	for _, r := range s {
		if r < 0x80 && unicode.IsPunct(r) || strings.ContainsRune("$+<=>^`|~", r) {
			out.WriteByte('\\')
		}
		out.WriteRune(r)
	}
	return out.String()
}

// sendMediaBatch claims items of one kind for delivery d and sends those
// it claimed — alone, or as an album — marking each delivered. An item
// Telegram refuses for good is marked with the refusal and the user told,
// rather than tried forever; an album refused is sent item by item, so
// that one bad item does not take the others with it.
func (b *Bot) sendMediaBatch(ctx context.Context, d *mediaDelivery, to *place, kind string, items []sessions.Media, replyTo int) ([]string, error) {
	var notes []string
	var claimed []sessions.Media
	for _, m := range items {
		var state ledger.MediaClaim
		var claims int
		err := d.stored(ctx, "claim", m.ID, func(ctx context.Context) (err error) {
			// Made again after a lost answer, the claim finds itself.
			state, claims, err = b.sess.Media.ClaimMediaSend(ctx, m.ID, d.claim)
			return err
		})
		if err != nil {
			// Storage stayed away: whether this claim landed is not
			// known, and it is left as it stands.
			return notes, errors.Join(err, b.releaseMedia(ctx, d, claimed))
		}
		switch {
		case state == ledger.MediaCut:
			b.log.WarnContext(ctx, "telegram: a file from a tool was being sent when its delivery was cut off; it is not sent again",
				slog.Int64("chat", to.chat), slog.String("media", m.ID))
			n, err := b.markMedia(ctx, d, []sessions.Media{m}, ledger.MediaUnsureRef+"cut off before its answer", sessions.MediaUnsure)
			notes = append(notes, n...)
			if err != nil {
				return notes, errors.Join(err, b.releaseMedia(ctx, d, claimed))
			}
		case state == ledger.MediaClaimed && claims > maxMediaClaims:
			b.log.WarnContext(ctx, "telegram: a file from a tool was not taken in its deliveries; it is given up", slog.Int64("chat", to.chat),
				slog.String("media", m.ID), slog.Int("deliveries", maxMediaClaims))
			n, err := b.markMedia(ctx, d, []sessions.Media{m}, ledger.MediaRefusedRef+"not taken in "+strconv.Itoa(maxMediaClaims)+" deliveries", sessions.MediaRefused)
			notes = append(notes, n...)
			if err != nil {
				return notes, errors.Join(err, b.releaseMedia(ctx, d, claimed))
			}
		case state == ledger.MediaClaimed:
			claimed = append(claimed, m)
		}
	}
	more, err := b.sendClaimed(ctx, d, to, kind, claimed, replyTo)
	return append(notes, more...), err
}

// sendClaimed sends items, each claimed by delivery d, and settles each
// claim: marked delivered, refused or unsure, or released when Telegram
// surely did not take them.
func (b *Bot) sendClaimed(ctx context.Context, d *mediaDelivery, to *place, kind string, items []sessions.Media, replyTo int) ([]string, error) {
	if len(items) == 0 {
		return nil, nil
	}
	method, params, files, sent, err := b.mediaRequest(ctx, d, *to, kind, items, replyTo)
	if err != nil || len(files) == 0 {
		return nil, errors.Join(err, b.releaseMedia(ctx, d, items))
	}
	ids, err := b.upload(ctx, method, params, files)
	if err != nil && to.thread != 0 && topicGone(err) {
		// The topic was closed or deleted: the files go to the General
		// topic, as the text does.
		*to = b.toGeneral(*to, "the files", err)
		if method, params, files, sent, err = b.mediaRequest(ctx, d, *to, kind, items, replyTo); err != nil {
			return nil, errors.Join(err, b.releaseMedia(ctx, d, items))
		}
		ids, err = b.upload(ctx, method, params, files)
	}
	switch {
	case err == nil:
		return b.markMedia(ctx, d, sent, strings.Join(ids, ","), "")
	case errors.Is(err, sessions.ErrUndeliverable) && len(sent) > 1:
		// One bad item refuses the whole album: each goes alone, so
		// that only the bad one is refused.
		b.log.WarnContext(ctx, "telegram: an album of files from a tool was refused; its items go one by one", slog.Int64("chat", to.chat),
			slog.String("error", b.redact(err)))
		var notes []string
		for i, m := range sent {
			more, err := b.sendClaimed(ctx, d, to, kind, []sessions.Media{m}, replyTo)
			notes = append(notes, more...)
			if err != nil {
				return notes, errors.Join(err, b.releaseMedia(ctx, d, sent[i+1:]))
			}
		}
		return notes, nil
	case errors.Is(err, sessions.ErrUndeliverable):
		b.log.WarnContext(ctx, "telegram: a file from a tool was refused; it is not sent again", slog.Int64("chat", to.chat),
			slog.String("method", method), slog.String("error", b.redact(err)))
		return b.markMedia(ctx, d, sent, ledger.MediaRefusedRef+b.redact(err), sessions.MediaRefused)
	case errors.Is(err, errMaybeSent):
		b.log.WarnContext(ctx, "telegram: the answer to a file's send was lost; it is not sent again", slog.Int64("chat", to.chat),
			slog.String("method", method), slog.String("error", b.redact(err)))
		return b.markMedia(ctx, d, sent, ledger.MediaUnsureRef+b.redact(err), sessions.MediaUnsure)
	}
	return nil, errors.Join(err, b.releaseMedia(ctx, d, items))
}

// mediaRequest is the request that sends items of one kind to to: the
// method, its parameters and files, and the items it carries (an item
// purged meanwhile is left out, its claim gone with it).
func (b *Bot) mediaRequest(ctx context.Context, d *mediaDelivery, to place, kind string, items []sessions.Media, replyTo int) (string, tgbotapi.Params, []tgbotapi.RequestFile, []sessions.Media, error) {
	var files []tgbotapi.RequestFile
	var inputs []any
	var sent []sessions.Media
	for i, m := range items {
		var f *sessions.MediaFile
		err := d.stored(ctx, "read", m.ID, func(ctx context.Context) (err error) {
			f, err = b.sess.Media.ToolMedia(ctx, m.ID)
			return err
		})
		if err != nil {
			return "", nil, nil, nil, err
		}
		if f == nil {
			continue // purged meanwhile
		}
		sent = append(sent, m)
		name := m.Name
		if name == "" {
			name = fmt.Sprintf("%s-%d%s", m.Kind, i+1, extensionOf(m.Mime))
		}
		field := "file-" + strconv.Itoa(i)
		files = append(files, tgbotapi.RequestFile{Name: field, Data: tgbotapi.FileBytes{Name: name, Bytes: f.Data}})
		attach := tgbotapi.FileURL("attach://" + field)
		switch kind {
		case "photo":
			inputs = append(inputs, tgbotapi.NewInputMediaPhoto(attach))
		case "audio":
			inputs = append(inputs, tgbotapi.NewInputMediaAudio(attach))
		default:
			inputs = append(inputs, tgbotapi.NewInputMediaDocument(attach))
		}
	}
	params := to.params()
	if replyTo != 0 {
		params.AddNonZero("reply_to_message_id", replyTo)
		params.AddBool("allow_sending_without_reply", true)
	}
	if len(files) == 1 {
		// One item goes by its own method, its file in the field named
		// after its kind.
		files[0].Name = kind
		return "send" + strings.ToUpper(kind[:1]) + kind[1:], params, files, sent, nil
	}
	media, err := json.Marshal(inputs)
	if err != nil {
		return "", nil, nil, nil, err
	}
	params["media"] = string(media)
	return "sendMediaGroup", params, files, sent, nil
}

// markMedia marks items delivered with ref; failure, when it is not "",
// says they may not have reached the user, and the lines returned tell
// them so.
func (b *Bot) markMedia(ctx context.Context, d *mediaDelivery, items []sessions.Media, ref, failure string) ([]string, error) {
	var notes []string
	for _, m := range items {
		if err := d.stored(ctx, "mark", m.ID, func(ctx context.Context) error { return b.sess.Media.MarkMediaDelivered(ctx, m.ID, ref) }); err != nil {
			return notes, err
		}
		if failure != "" {
			notes = append(notes, b.mediaNote(m, failure))
		}
	}
	return notes, nil
}

// releaseMedia drops delivery d's claims on items: Telegram surely did
// not take them (or they were never sent), and a later delivery sends
// them.
func (b *Bot) releaseMedia(ctx context.Context, d *mediaDelivery, items []sessions.Media) error {
	var errs []error
	for _, m := range items {
		errs = append(errs, d.stored(ctx, "release", m.ID, func(ctx context.Context) error { return b.sess.Media.ReleaseMediaSend(ctx, m.ID, d.claim) }))
	}
	return errors.Join(errs...)
}

// mediaDelivery is one delivery's send of a reply's files: the token its
// claims carry, and whether storage has stayed away past its waits.
type mediaDelivery struct {
	b     *Bot
	claim string
	away  bool
}

// stored makes call, a storage call of item id's send (what it is, for
// the log), again while storage fails — 0.1 s apart, doubling — until it
// answers, for mediaStoreWait from its first try at most, each try
// ending by then: a claim whose fate is unknown, or
// one left standing, would have the item's next delivery take it for one
// a crash cut off, never sent. The wait stays under the lease a replica
// holds its turns by (ledger.LeaseTTL), so no other replica has taken
// the turn over when the delivery goes on. Once storage has stayed away
// that long, the delivery's other calls are made once each: the delivery
// fails, whatever claim stands is taken as cut off, and the turn's text
// waits for a later delivery. A refusal for good, or a closed store, is
// not made again.
func (d *mediaDelivery) stored(ctx context.Context, what, id string, call func(ctx context.Context) error) error {
	start := time.Now()
	wait := 100 * time.Millisecond
	for try := 1; ; try++ {
		cctx, cancel := context.WithDeadline(ctx, start.Add(mediaStoreWait)) // (a call made in time ends in time)
		err := call(cctx)
		cancel()
		switch {
		case err == nil:
			return nil
		case d.away || errors.Is(err, ledger.ErrRejected) || errors.Is(err, ledger.ErrClosed):
			return err
		case try == mediaStoreTries || time.Since(start)+wait >= mediaStoreWait:
			d.away = true
			d.b.log.ErrorContext(ctx, "telegram: storage stayed away during a file's send; the file may be taken as cut off",
				slog.String("media", id), slog.String("call", what), slog.String("error", err.Error()))
			return err
		case try == 1:
			d.b.log.WarnContext(ctx, "telegram: storage failed during a file's send; waiting for it",
				slog.String("media", id), slog.String("call", what), slog.String("error", err.Error()))
		}
		if d.b.opts.Sleep(ctx, wait) != nil {
			return err
		}
		wait = min(2*wait, 3200*time.Millisecond)
	}
}

// How long one storage call of a file's send is waited out, from its
// first try: 15 s (a replica's lease lasts 30 s from its last heartbeat,
// made every 10 s), and at most 12 tries.
const (
	mediaStoreWait  = 15 * time.Second
	mediaStoreTries = 12
)

// upload makes an upload request. A request Telegram surely did not take
// is made again — a 429 after its retry_after, a 5xx or an unreachable
// Bot API with backoff — up to maxUploadAttempt times; a 4xx other than
// 429 wraps sessions.ErrUndeliverable, and a request whose answer never
// came (Telegram may have taken it) wraps errMaybeSent and is not made
// again. It returns the ids of the messages sent.
func (b *Bot) upload(ctx context.Context, method string, params tgbotapi.Params, files []tgbotapi.RequestFile) ([]string, error) {
	var err error
	for attempt := 0; attempt < maxUploadAttempt; attempt++ {
		var resp *tgbotapi.APIResponse
		if resp, err = b.api.UploadFiles(method, params, files); err == nil {
			var ids []string
			var one tgbotapi.Message
			var many []tgbotapi.Message
			if json.Unmarshal(resp.Result, &many) == nil {
				for _, m := range many {
					ids = append(ids, strconv.Itoa(m.MessageID))
				}
			} else if json.Unmarshal(resp.Result, &one) == nil {
				ids = append(ids, strconv.Itoa(one.MessageID))
			}
			return ids, nil
		}
		wait := time.Duration(1<<attempt) * 500 * time.Millisecond
		var apiErr *tgbotapi.Error
		switch {
		case errors.As(err, &apiErr):
			// Telegram answered, and took nothing. (The library leaves
			// an upload's error code on the answer, not on the error.)
			code := apiErr.Code
			if code == 0 && resp != nil {
				code = resp.ErrorCode
			}
			if apiErr.RetryAfter > 0 {
				wait = time.Duration(apiErr.RetryAfter) * time.Second
			} else if code >= 400 && code < 500 && code != http.StatusTooManyRequests {
				return nil, fmt.Errorf("%w: %w", sessions.ErrUndeliverable,
					&tgbotapi.Error{Code: code, Message: b.redact(err), ResponseParameters: apiErr.ResponseParameters})
			}
		case !neverSent(err):
			return nil, fmt.Errorf("%w: %s", errMaybeSent, b.redact(err))
		}
		if b.opts.Sleep(ctx, wait) != nil {
			break
		}
	}
	return nil, errors.New(b.redact(err))
}

// neverSent reports whether a request's failure shows the Bot API never
// had it whole: it was not written out (ctxClient), or its connection
// could not be made.
func neverSent(err error) bool {
	var nw *notWritten
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &nw) || errors.As(err, &dns) || errors.As(err, &op) && op.Op == "dial"
}

// extensionOf is a file extension for a type Telegram shows by it.
func extensionOf(mime string) string {
	switch mime {
	case "image/png":
		return ".png"
	case "image/jpeg":
		return ".jpg"
	case "image/webp":
		return ".webp"
	case "image/gif":
		return ".gif"
	case "application/pdf":
		return ".pdf"
	case "audio/mpeg":
		return ".mp3"
	case "audio/ogg":
		return ".ogg"
	case "audio/wav":
		return ".wav"
	}
	return ""
}
