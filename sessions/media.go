package sessions

// Media from tools: what a tool call returned besides text (pictures,
// audio clips, files) is kept with its turn within the limits
// (MediaLimits), stored with the call's outcome, told to the model in its
// result's text, and delivered with the turn's reply (Reply.Media): a
// channel sends each item, or serves it by id (Conversations.ToolMedia).

import (
	"context"
	"fmt"
	"log/slog"
	"mime"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/tools"
)

// Default limits of media from tools.
const (
	DefaultMediaMaxBytes = 10 << 20
	DefaultMediaMaxItems = 8
)

// MediaLimits bound what a tool call's media the gateway keeps: an item
// over MaxBytes, or past the MaxItems of its call, is dropped, and the
// model is told so in the call's result.
type MediaLimits struct {
	MaxBytes int64 // per item (0: DefaultMediaMaxBytes)
	MaxItems int   // per call (0: DefaultMediaMaxItems)
}

func (l MediaLimits) maxBytes() int64 {
	if l.MaxBytes <= 0 {
		return DefaultMediaMaxBytes
	}
	return l.MaxBytes
}

func (l MediaLimits) maxItems() int {
	if l.MaxItems <= 0 {
		return DefaultMediaMaxItems
	}
	return l.MaxItems
}

// Media is one item a tool returned, as a reply carries it: metadata
// only. A channel fetches its bytes by ID (Conversations.ToolMedia).
type Media struct {
	ID   string
	Kind string // image, audio or file (tools.MediaImage, …)
	Mime string
	Name string
	Size int64
	// Delivered: a channel that marks delivery sent it already.
	Delivered bool
	// Failure, on an item marked delivered, says it may not have reached
	// the user: MediaRefused or MediaUnsure ("" when it did).
	Failure string
}

// Why an item marked delivered may not have reached the user.
const (
	MediaRefused = "refused" // the channel refused it for good
	MediaUnsure  = "unsure"  // its send was cut off after it may have gone
)

// mediaFailure is the Failure a delivery ref records.
func mediaFailure(ref string) string {
	switch {
	case strings.HasPrefix(ref, ledger.MediaRefusedRef):
		return MediaRefused
	case strings.HasPrefix(ref, ledger.MediaUnsureRef):
		return MediaUnsure
	}
	return ""
}

// MediaFile is an item with its bytes and the session key whose
// conversation it belongs to (who may fetch it).
type MediaFile struct {
	Media
	SessionKey string
	Data       []byte
}

// keepMedia is the media of a call's result that the gateway keeps, as
// rows of the call (each with a new id), and text with a line for each
// item dropped and for those the user gets.
func keepMedia(lim MediaLimits, c *ledger.ToolCall, key string, media []tools.Media, text string) ([]ledger.ToolMedia, string) {
	var rows []ledger.ToolMedia
	for _, it := range media {
		it.Mime, it.Name = mediaType(it.Mime), mediaName(it.Name)
		what := it.Kind
		if it.Mime != "" {
			what += " " + it.Mime
		}
		switch {
		case len(it.Data) == 0:
			continue
		case int64(len(it.Data)) > lim.maxBytes():
			text += fmt.Sprintf("\n[%s of %d bytes not kept: over the limit of %d bytes per item; the user does not get it]", what, len(it.Data), lim.maxBytes())
			continue
		case len(rows) >= lim.maxItems():
			text += fmt.Sprintf("\n[%s not kept: a call keeps at most %d items; the user does not get it]", what, lim.maxItems())
			continue
		}
		rows = append(rows, ledger.ToolMedia{ID: uuid.NewString(), ConversationID: c.ConversationID, TurnSeq: c.TurnSeq, ToolCallID: c.ID,
			Idx: len(rows), SessionKey: key, Kind: it.Kind, Mime: it.Mime, Name: it.Name, Size: int64(len(it.Data)), Data: it.Data})
	}
	if len(rows) > 0 {
		text += fmt.Sprintf("\n[%d of the items above will be sent to the user with your reply]", len(rows))
	}
	return rows, text
}

// mediaType is a tool's word for an item's type as it is kept: the
// lower-cased type/subtype of a well-formed media type, without its
// parameters, at most maxMediaField bytes; "" for anything else. The
// tool's text is untrusted: it goes into storage, Content-Type headers
// and uploads.
func mediaType(s string) string {
	t, _, err := mime.ParseMediaType(s)
	if err != nil || len(t) > maxMediaField || !strings.Contains(t, "/") {
		return ""
	}
	return t
}

// mediaName is a tool's name for an item as it is kept: its last path
// element, without control characters, cut to maxMediaField bytes at a
// character's edge; "" when nothing is left.
func mediaName(s string) string {
	if i := strings.LastIndexAny(s, `/\`); i >= 0 {
		s = s[i+1:]
	}
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return -1
		}
		return r
	}, s)
	for len(s) > maxMediaField {
		_, n := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-n]
	}
	if s = strings.TrimSpace(s); s == "." || s == ".." {
		return ""
	}
	return s
}

// maxMediaField is the most bytes of an item's type or name kept (their
// columns hold 255).
const maxMediaField = 200

// mediaAttachments are the images of rows as a tool message's
// attachments: a model that reads images is given them (fetchImages
// loads their bytes by Attachment.Media).
func mediaAttachments(rows []ledger.ToolMedia) []agent.Attachment {
	var out []agent.Attachment
	for _, r := range rows {
		if r.Kind != tools.MediaImage {
			continue
		}
		out = append(out, agent.Attachment{Kind: agent.KindImage, Mime: r.Mime, Name: r.Name, Size: r.Size, Media: r.ID, Data: r.Data})
	}
	return out
}

func toMedia(rows []ledger.ToolMedia) []Media {
	if len(rows) == 0 {
		return nil
	}
	out := make([]Media, len(rows))
	for i, r := range rows {
		out[i] = Media{ID: r.ID, Kind: r.Kind, Mime: r.Mime, Name: r.Name, Size: r.Size, Delivered: r.DeliveredAt != nil,
			Failure: mediaFailure(r.DeliveryRef)}
	}
	return out
}

// toolMedia is what the turn path reads of the media tools returned:
// a turn's, for its reply (ofTurn), and the pictures a model that reads
// images is given (images). It holds no state of its own.
type toolMedia struct {
	store interface {
		ToolMediaOfTurn(ctx context.Context, convID string, turn int64) ([]ledger.ToolMedia, error)
		ToolMedia(ctx context.Context, id string) (*ledger.ToolMedia, error)
	}
	tools bool // tools are offered (Options.Tools): without, there are none
	log   *slog.Logger
}

// ofTurn is the media of turn lead of conversation conv, for its reply.
func (tm *toolMedia) ofTurn(ctx context.Context, conv string, lead int64) ([]Media, error) {
	rows, err := tm.store.ToolMediaOfTurn(ctx, conv, lead)
	return toMedia(rows), err
}

// replyMedia is the media of turn lead of conversation conv for its
// reply; none, and read false, when they cannot be read (logged: the
// reply goes without, and says so where it can: Reply.MediaUnread).
func replyMedia(ctx context.Context, st interface {
	ToolMediaOfTurn(ctx context.Context, convID string, turn int64) ([]ledger.ToolMedia, error)
}, log *slog.Logger, conv string, lead int64) (media []Media, read bool) {
	rows, err := st.ToolMediaOfTurn(ctx, conv, lead)
	if err != nil {
		log.WarnContext(ctx, "the media of a turn could not be read; its reply goes without them", slog.String("conversation", conv),
			slog.Int64("turn", lead), slog.String("error", err.Error()))
		return nil, false
	}
	return toMedia(rows), true
}

// A model is given a tool's picture of at most MaxToolImageBytes, and
// at most MaxToolImagesBytes of them in one request (the newest first):
// an item may be kept up to agent.tools.media.max_bytes (50 MiB at
// most), more than providers take in a request.
const (
	MaxToolImageBytes  = 5 << 20
	MaxToolImagesBytes = 20 << 20
)

// images gives a model that reads images the pictures tools
// returned in this turn (req.Turn) and in the history: their bytes are
// read from storage, the newest MaxTurnImages of them within the byte
// bounds above; an older one, one past the bounds, or one gone
// (purged), is marked Missing. This turn's own pictures have
// their bytes already. For a model that does not read images nothing is
// read: the result's text line tells it what there was.
func (tm *toolMedia) images(ctx context.Context, ag agent.Agent, req *agent.Request) {
	if !tm.tools || !agent.ReadsImages(ag) {
		return
	}
	var want []*agent.Attachment
	collect := func(msgs []agent.Message) {
		for i := len(msgs) - 1; i >= 0; i-- {
			atts := msgs[i].Attachments
			for j := len(atts) - 1; j >= 0; j-- {
				if atts[j].Media != "" && atts[j].Kind == agent.KindImage {
					want = append(want, &atts[j])
				}
			}
		}
	}
	collect(req.Turn)
	collect(req.History)
	budget := int64(MaxToolImagesBytes)
	for i, a := range want {
		size := a.Size
		if a.Data != nil {
			size = int64(len(a.Data))
		}
		switch {
		case i >= MaxTurnImages || size > MaxToolImageBytes || size > budget:
			// Past the newest, or too large for a request (the result's
			// text line still tells the model what it was).
			a.Data, a.Missing = nil, true
			continue
		case a.Data != nil:
		default:
			r, err := tm.store.ToolMedia(ctx, a.Media)
			if err != nil || r == nil {
				if err != nil {
					tm.log.WarnContext(ctx, "a picture a tool returned could not be read; the model is told it is no longer available",
						slog.String("media", a.Media), slog.String("error", err.Error()))
				}
				a.Missing = true
				continue
			}
			if n := int64(len(r.Data)); n > MaxToolImageBytes || n > budget {
				a.Missing = true // (a size not known before it was read)
				continue
			}
			a.Data = r.Data
		}
		budget -= int64(len(a.Data))
	}
}

// ToolMedia returns the item a tool returned with that id, bytes and
// all, or nil when there is none.
func (c *Conversations) ToolMedia(ctx context.Context, id string) (*MediaFile, error) {
	r, err := c.store.ToolMedia(ctx, id)
	if err != nil || r == nil {
		return nil, err
	}
	return &MediaFile{Media: toMedia([]ledger.ToolMedia{*r})[0], SessionKey: r.SessionKey, Data: r.Data}, nil
}

// ToolMediaInfo is ToolMedia without the bytes (Data nil): whose the
// item is and how large, read before a fetch loads it.
func (c *Conversations) ToolMediaInfo(ctx context.Context, id string) (*MediaFile, error) {
	r, err := c.store.ToolMediaInfo(ctx, id)
	if err != nil || r == nil {
		return nil, err
	}
	return &MediaFile{Media: toMedia([]ledger.ToolMedia{*r})[0], SessionKey: r.SessionKey}, nil
}

// ClaimMediaSend claims item id for a channel's send, before the send,
// by the delivery that names itself claim (a token of its own):
// ledger.MediaClaimed and the claims made so far, or how the item stands
// (delivered, cut off in an earlier send, gone). A delivery that claims
// again, not knowing whether its claim landed, finds it its own. See
// ledger.ToolMedia.
func (c *Conversations) ClaimMediaSend(ctx context.Context, id, claim string) (ledger.MediaClaim, int, error) {
	return c.store.ClaimMediaSend(ctx, id, claim, c.now())
}

// ReleaseMediaSend drops the claim of the delivery named claim, whose
// send surely did not reach the user (or was never made): a later
// delivery sends the item. It is safe whether or not that claim landed.
func (c *Conversations) ReleaseMediaSend(ctx context.Context, id, claim string) error {
	return c.store.ReleaseMediaSend(ctx, id, claim)
}

// MarkMediaDelivered records that a channel sent item id (ref: what it
// sent, or ledger.MediaRefusedRef / MediaUnsureRef and why it may not
// have reached the user); a delivery done again skips it. Marking it
// twice is no error.
func (c *Conversations) MarkMediaDelivered(ctx context.Context, id, ref string) error {
	_, err := c.store.MarkMediaDelivered(ctx, id, ref, c.now())
	return err
}
