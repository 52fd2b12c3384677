package telegram

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"unicode/utf8"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions"
)

// What comes in besides text. Photos and image documents are images:
// their file id is stored with the message, and the image is fetched
// again (getFile, then the file download) whenever a turn needs it, for a
// model that reads images. Text documents are read at once, into the
// message's text. Voice notes and audio files, with a transcriber, are
// downloaded and transcribed at once: the transcript is the message's
// text (Bot.audio). Everything else gets a reply saying it cannot be read;
// a caption is answered whatever it came with.

// Limits of what is read.
const (
	// DefaultMaxImageBytes is channels.telegram.max_image_bytes' default.
	DefaultMaxImageBytes = 5 << 20
	// MaxDocumentBytes bounds a text document read into a message.
	MaxDocumentBytes = 256 << 10
	// DefaultMaxTextBytes is the size limit of a stored message's text
	// (the session manager's), which a document's text must fit in.
	DefaultMaxTextBytes = 64 << 10
	// visionTold remembers, in memory, this many chats that were told
	// images are not read; a restart tells them once more.
	visionToldChats = 100_000
)

// Texts about what the bot cannot read.
const (
	noVisionText    = "I can't see pictures here — I only read the text you send with them."
	imageTooBigText = "That picture is too large for me to look at (over %s)."
	imageTypeText   = "I can't read this kind of picture (%s); please send it as a photo."
	fileTypeText    = "I can't read this kind of file (%s) yet — please paste its text."
	fileTooBigText  = "The file %s is too long for me to read (%d KiB; I read up to %d KiB)."
	fileBinaryText  = "The file %s is not readable text."
	fileFailedText  = "I couldn't download the file %s; please send it again."
)

// unsupportedTexts are the replies to messages of kinds the bot cannot read.
var unsupportedTexts = map[string]string{
	"voice":      "I can't listen to voice messages yet — please type it.",
	"audio":      "I can't listen to audio yet — please type what you need.",
	"video":      "I can't watch videos yet — please describe it in text.",
	"video_note": "I can't watch video messages yet — please type it.",
	"animation":  "I can't watch GIFs yet — please describe it in text.",
	"sticker":    "I can't read stickers — please say it in words.",
	"location":   "I can't use locations yet — please type the place.",
	"venue":      "I can't use locations yet — please type the place.",
	"contact":    "I can't read contacts yet — please type what you need.",
	"poll":       "I can't take part in polls — please type your question.",
	"dice":       "I can't play with dice — please type your message.",
	"other":      "I can only read text, pictures and text files.",
}

// imageMimes are the image types a model reads.
var imageMimes = map[string]bool{"image/jpeg": true, "image/png": true, "image/gif": true, "image/webp": true}

// mediaState is what the bot remembers about media: the chats told that
// images are not read.
type mediaState struct {
	once sync.Once
	told *lru.Cache[int64, struct{}]
}

// firstNoVision reports whether the chat has not yet been told that
// images are not read, and remembers that it now is.
func (b *Bot) firstNoVision(chatID int64) bool {
	b.media.once.Do(func() { b.media.told, _ = lru.New[int64, struct{}](visionToldChats) })
	seen, _ := b.media.told.ContainsOrAdd(chatID, struct{}{})
	return !seen
}

// inbound is what a message carries besides its text: the text to store
// (the caption, with a text document's content before it), the
// attachments' metadata, and the notices to send before the reply.
type inbound struct {
	text    string
	atts    []agent.Attachment
	notices []string
	// transcript is what a voice note or audio file said: the reply
	// shows it quoted (Bot.quoteOf).
	transcript string
	// spoken: audio the bot tried to listen to and could not; its notice
	// goes out in a group too, where media without a caption gets none.
	spoken bool
}

// messageText is the text the user wrote: a message's text, or a media
// message's caption.
func messageText(m *message) string {
	if m.Text != "" {
		return m.Text
	}
	return m.Caption
}

// readMedia turns a message into what is stored and said. text is the
// user's text (caption) with the bot's mention taken out; key is the
// message's session key, whose user's budget decides whether voice is
// transcribed.
func (b *Bot) readMedia(ctx context.Context, m *message, key, text string) inbound {
	in := inbound{text: text}
	switch {
	case len(m.Photo) > 0:
		if p, ok := b.pickPhoto(m.Photo); ok {
			b.image(m, &in, agent.Attachment{Kind: agent.KindImage, Type: "photo", Mime: "image/jpeg", FileID: p.FileID, Size: int64(p.FileSize)})
		} else {
			in.notices = append(in.notices, fmt.Sprintf(imageTooBigText, byteSize(b.opts.MaxImageBytes)))
		}
	case m.Animation != nil: // also carries a document: checked first
		b.unsupported(&in, "animation", agent.Attachment{FileID: m.Animation.FileID, Mime: m.Animation.MimeType, Name: m.Animation.FileName, Size: int64(m.Animation.FileSize)})
	case m.Document != nil:
		b.document(ctx, m, &in)
	case m.Voice != nil:
		b.audio(ctx, &in, key, "voice", agent.Attachment{FileID: m.Voice.FileID, Mime: m.Voice.MimeType, Size: int64(m.Voice.FileSize)})
	case m.Audio != nil:
		b.audio(ctx, &in, key, "audio", agent.Attachment{FileID: m.Audio.FileID, Mime: m.Audio.MimeType, Name: m.Audio.FileName, Size: int64(m.Audio.FileSize)})
	case m.Video != nil:
		b.unsupported(&in, "video", agent.Attachment{FileID: m.Video.FileID, Mime: m.Video.MimeType, Name: m.Video.FileName, Size: int64(m.Video.FileSize)})
	case m.VideoNote != nil:
		b.unsupported(&in, "video_note", agent.Attachment{FileID: m.VideoNote.FileID, Size: int64(m.VideoNote.FileSize)})
	case m.Sticker != nil:
		b.unsupported(&in, "sticker", agent.Attachment{FileID: m.Sticker.FileID, Size: int64(m.Sticker.FileSize)})
	case m.Location != nil:
		b.unsupported(&in, "location", agent.Attachment{})
	case m.Venue != nil:
		b.unsupported(&in, "venue", agent.Attachment{})
	case m.Contact != nil:
		b.unsupported(&in, "contact", agent.Attachment{})
	case m.Poll != nil:
		b.unsupported(&in, "poll", agent.Attachment{})
	case m.Dice != nil:
		b.unsupported(&in, "dice", agent.Attachment{})
	case m.Text == "" && m.Caption == "":
		// Anything else that is not text (a game, a story…), in a private
		// chat; service messages in groups (joins, pins) need no answer.
		if m.Chat.IsPrivate() {
			in.notices = append(in.notices, unsupportedTexts["other"])
		}
	}
	if !m.Chat.IsPrivate() && strings.TrimSpace(in.text) == "" && !in.spoken {
		// In a group, media nobody wrote to the bot about (no caption)
		// gets no notices: the group is not told about every sticker.
		in.notices = nil
	}
	return in
}

// pickPhoto is the largest size of a photo within max_image_bytes
// (sizes come smallest first; one of unknown size counts as fitting).
func (b *Bot) pickPhoto(sizes []tgbotapi.PhotoSize) (tgbotapi.PhotoSize, bool) {
	best, ok := tgbotapi.PhotoSize{}, false
	for _, p := range sizes {
		if int64(p.FileSize) > b.opts.MaxImageBytes {
			continue
		}
		if !ok || p.Width*p.Height >= best.Width*best.Height {
			best, ok = p, true
		}
	}
	return best, ok
}

// image adds an image. Without a model that reads images, the caption is
// answered and the chat told once; an image without a caption gets the
// notice every time (else it would get no answer at all) and is not
// stored.
func (b *Bot) image(m *message, in *inbound, a agent.Attachment) {
	if !b.opts.Vision {
		if strings.TrimSpace(in.text) == "" {
			in.notices = append(in.notices, noVisionText)
			return
		}
		if b.firstNoVision(m.Chat.ID) {
			in.notices = append(in.notices, noVisionText)
		}
	}
	in.atts = append(in.atts, a)
}

// unsupported answers a kind the bot cannot read; its caption, if any, is
// stored and answered with the attachment's metadata.
func (b *Bot) unsupported(in *inbound, kind string, a agent.Attachment) {
	in.notices = append(in.notices, unsupportedTexts[kind])
	if strings.TrimSpace(in.text) != "" {
		a.Kind, a.Type = agent.KindOther, kind
		in.atts = append(in.atts, a)
	}
}

// document handles a file: an image, text to read, or something else.
func (b *Bot) document(ctx context.Context, m *message, in *inbound) {
	d := m.Document
	mime := strings.ToLower(strings.TrimSpace(strings.Split(d.MimeType, ";")[0]))
	a := agent.Attachment{FileID: d.FileID, Mime: mime, Name: d.FileName, Size: int64(d.FileSize)}
	name := d.FileName
	if name == "" {
		name = "(unnamed)"
	}
	switch {
	case imageMimes[mime]:
		if a.Size > b.opts.MaxImageBytes {
			in.notices = append(in.notices, fmt.Sprintf(imageTooBigText, byteSize(b.opts.MaxImageBytes)))
			return
		}
		a.Kind, a.Type = agent.KindImage, "document"
		b.image(m, in, a)
	case strings.HasPrefix(mime, "image/"):
		in.notices = append(in.notices, fmt.Sprintf(imageTypeText, mime))
		if strings.TrimSpace(in.text) != "" {
			a.Kind, a.Type = agent.KindOther, "document"
			in.atts = append(in.atts, a)
		}
	case strings.HasPrefix(mime, "text/") || mime == "application/json":
		limit := b.documentLimit(in.text, name)
		if a.Size > int64(limit) {
			in.notices = append(in.notices, fmt.Sprintf(fileTooBigText, name, (a.Size+1023)>>10, limit>>10))
			b.keepCaption(in, a)
			return
		}
		data, err := b.download(ctx, d.FileID, int64(limit))
		switch {
		case errors.Is(err, errTooBig):
			in.notices = append(in.notices, fmt.Sprintf(fileTooBigText, name, (a.Size+1023)>>10, limit>>10))
			b.keepCaption(in, a)
			return
		case err != nil:
			b.log.Warn("telegram: downloading a document failed", slog.String("file", name), slog.String("error", b.redact(err)))
			in.notices = append(in.notices, fmt.Sprintf(fileFailedText, name))
			b.keepCaption(in, a)
			return
		case !utf8.Valid(data) || strings.ContainsRune(string(data), 0):
			in.notices = append(in.notices, fmt.Sprintf(fileBinaryText, name))
			b.keepCaption(in, a)
			return
		}
		a.Kind, a.Size = agent.KindDocument, int64(len(data))
		body := "file " + name + ":\n" + fenced(string(data))
		if strings.TrimSpace(in.text) != "" {
			body += "\n\n" + in.text
		}
		in.text = body
		in.atts = append(in.atts, a)
	default:
		kind := mime
		if kind == "" {
			kind = name
		}
		in.notices = append(in.notices, fmt.Sprintf(fileTypeText, kind))
		b.keepCaption(in, a)
	}
}

// keepCaption stores a file that could not be read with its caption, so
// the caption is answered and the file's metadata kept.
func (b *Bot) keepCaption(in *inbound, a agent.Attachment) {
	if strings.TrimSpace(in.text) != "" {
		a.Kind, a.Type = agent.KindOther, "document"
		in.atts = append(in.atts, a)
	}
}

// documentLimit is how many bytes of a document fit in a stored message
// beside its caption and the lines around it.
func (b *Bot) documentLimit(caption, name string) int {
	room := b.opts.MaxTextBytes - len(caption) - len(name) - 64
	return max(0, min(MaxDocumentBytes, room))
}

// fenced puts text in a Markdown code fence longer than any run of
// backticks in it.
func fenced(text string) string {
	fence := "```"
	for strings.Contains(text, fence) {
		fence += "`"
	}
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	return fence + "\n" + text + fence
}

var errTooBig = errors.New("file is over the size limit")

// errGone: Telegram no longer serves the file (or never did).
var errGone = errors.New("telegram no longer has the file")

// download fetches a file by id: getFile, then the download from the
// Bot API server's file route (api_url's, so a self-hosted server
// works). A file over limit bytes is refused (errTooBig).
func (b *Bot) download(ctx context.Context, fileID string, limit int64) ([]byte, error) {
	f, err := b.api.GetFile(tgbotapi.FileConfig{FileID: fileID})
	if err != nil {
		var apiErr *tgbotapi.Error
		if errors.As(err, &apiErr) && apiErr.Code == http.StatusBadRequest {
			return nil, fmt.Errorf("%w: %s", errGone, b.redact(err))
		}
		return nil, errors.New(b.redact(err))
	}
	if f.FileSize > 0 && int64(f.FileSize) > limit {
		return nil, errTooBig
	}
	if f.FilePath == "" {
		return nil, fmt.Errorf("%w: getFile gave no file_path", errGone)
	}
	url := strings.TrimRight(b.opts.APIURL, "/") + "/file/bot" + b.opts.Token + "/" + strings.TrimLeft(f.FilePath, "/")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, errors.New(b.redact(err))
	}
	resp, err := b.ctx.Do(req) // bounded by its progress, as every request
	if err != nil {
		return nil, errors.New(b.redact(err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusBadRequest:
		return nil, fmt.Errorf("%w: download answered %d", errGone, resp.StatusCode)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("file download answered %d", resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, errors.New(b.redact(err))
	}
	if int64(len(data)) > limit {
		return nil, errTooBig
	}
	return data, nil
}

// fetch is the bot's sessions.Fetcher: an image of a stored message,
// downloaded again for the turn that needs it.
func (b *Bot) fetch(ctx context.Context, a agent.Attachment) ([]byte, error) {
	if a.FileID == "" {
		return nil, errGone
	}
	return b.download(ctx, a.FileID, b.opts.MaxImageBytes)
}

// Fetcher is the bot's fetcher of stored images, for the session manager
// (sessions.Route.Fetch).
func (b *Bot) Fetcher() sessions.Fetcher { return b.fetch }

// byteSize is n for people: "5 MiB", "300 KiB", "512 bytes".
func byteSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
