package telegram

// Media from tools, delivered with their turn's reply: a picture as a
// photo, an audio clip as audio, anything else as a document, several of a
// kind as an album (sendMediaGroup: Telegram mixes no documents or audio
// with other media, so each kind goes in albums of its own, up to 10
// items each). They go before the reply's text, each marked delivered
// (MediaDeliveries.MarkMediaDelivered) as soon as Telegram took it, and
// the turn is marked delivered after the text: a delivery done again (a
// restart, a repeated update, the recovery pass) skips every item marked.
// The one window left is an item's own, between its send and its mark:
// a crash there sends it again, as the text's window does (docs/telegram.md).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/chatgate/chatgate/sessions"
)

// MediaDeliveries are the media tools returned: read by id to be sent,
// and marked delivered item by item.
type MediaDeliveries interface {
	ToolMedia(ctx context.Context, id string) (*sessions.MediaFile, error)
	MarkMediaDelivered(ctx context.Context, id, ref string) error
}

// Telegram's limits on what a bot uploads.
const (
	maxPhotoBytes    = 10 << 20 // a larger picture goes as a document
	maxAlbumItems    = 10
	maxUploadAttempt = 5
)

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
// first failure; the items sent before it stay marked.
func (b *Bot) sendMedia(ctx context.Context, to place, r sessions.Reply, replyTo int) error {
	if r.MediaUnread {
		// Marked delivered now, the reply would never bring them: the
		// delivery is done again later (sessions' recovery), with them.
		return errors.New("telegram: the files of the reply could not be read; it is delivered again later")
	}
	media := r.Media
	if len(media) == 0 || b.sess.Media == nil {
		return nil
	}
	ctx = context.WithoutCancel(ctx) // delivered even while stopping
	byKind := map[string][]sessions.Media{}
	for _, m := range media {
		if !m.Delivered {
			k := uploadKind(m)
			byKind[k] = append(byKind[k], m)
		}
	}
	for _, kind := range []string{"photo", "audio", "document"} {
		items := byKind[kind]
		for len(items) > 0 {
			n := min(len(items), maxAlbumItems)
			if len(items)-n == 1 && n > 2 {
				n-- // no album of one left behind
			}
			if err := b.sendMediaBatch(ctx, to, kind, items[:n], replyTo); err != nil {
				return err
			}
			items = items[n:]
		}
	}
	return nil
}

// sendMediaBatch sends items of one kind — alone, or as an album — and
// marks each delivered. An item Telegram refuses for good is marked
// with the refusal, and the user told, rather than tried forever.
func (b *Bot) sendMediaBatch(ctx context.Context, to place, kind string, items []sessions.Media, replyTo int) error {
	var files []tgbotapi.RequestFile
	var inputs []any
	for i, m := range items {
		f, err := b.sess.Media.ToolMedia(ctx, m.ID)
		if err != nil {
			return err
		}
		if f == nil {
			continue // purged meanwhile
		}
		name := m.Name
		if name == "" {
			name = fmt.Sprintf("%s-%d%s", m.Kind, i+1, extensionOf(m.Mime))
		}
		data := tgbotapi.FileBytes{Name: name, Bytes: f.Data}
		if len(items) == 1 {
			files = append(files, tgbotapi.RequestFile{Name: kind, Data: data})
			break
		}
		field := "file-" + strconv.Itoa(i)
		files = append(files, tgbotapi.RequestFile{Name: field, Data: data})
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
	if len(files) == 0 {
		return nil
	}
	params := to.params()
	method := "sendMediaGroup"
	if len(items) == 1 {
		method = "send" + strings.ToUpper(kind[:1]) + kind[1:]
	} else {
		media, err := json.Marshal(inputs)
		if err != nil {
			return err
		}
		params["media"] = string(media)
	}
	if replyTo != 0 {
		params.AddNonZero("reply_to_message_id", replyTo)
		params.AddBool("allow_sending_without_reply", true)
	}
	ids, err := b.upload(ctx, method, params, files)
	ref := strings.Join(ids, ",")
	switch {
	case errors.Is(err, sessions.ErrUndeliverable):
		b.log.WarnContext(ctx, "telegram: a file from a tool was refused; it is not sent again", slog.Int64("chat", to.chat),
			slog.String("method", method), slog.String("error", b.redact(err)))
		ref = "refused: " + b.redact(err)
	case err != nil:
		return err
	}
	for _, m := range items {
		if merr := b.sess.Media.MarkMediaDelivered(ctx, m.ID, ref); merr != nil {
			return merr
		}
	}
	return nil
}

// upload makes an upload request, waiting out 429s as retry_after says
// and retrying other failures with backoff; a 4xx other than 429 wraps
// sessions.ErrUndeliverable. It returns the ids of the messages sent.
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
		if errors.As(err, &apiErr) {
			if apiErr.RetryAfter > 0 {
				wait = time.Duration(apiErr.RetryAfter) * time.Second
			} else if apiErr.Code >= 400 && apiErr.Code < 500 && apiErr.Code != http.StatusTooManyRequests {
				return nil, fmt.Errorf("%w: %w", sessions.ErrUndeliverable,
					&tgbotapi.Error{Code: apiErr.Code, Message: b.redact(err), ResponseParameters: apiErr.ResponseParameters})
			}
		}
		if b.opts.Sleep(ctx, wait) != nil {
			break
		}
	}
	return nil, errors.New(b.redact(err))
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
	}
	return ""
}
