package gateway

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/chatgate/chatgate/sessions"
)

// Media from tools over the WebSocket channel: a reply frame lists what
// the turn's tool calls returned (attachments: id, kind, mime, name, size,
// url), and the client fetches each from its url, GET /ws/media/{id},
// authenticated by the principal's auth token (Authorization: Bearer, or
// ?token=) or by the resume token ready gave it (Authorization: Session),
// which is only ever issued to the principal it names. The resume token
// is a long-lived credential: it is taken from the header only, never
// from the URL (where it would end up in logs and browser history). Only
// the principal whose conversation it is gets the bytes; anyone else gets
// 404, as for an id that does not exist.
//
// A fetch loads the whole item into memory: the bytes being served at
// once are bounded process-wide (WSOptions.MediaServeBytes), and a fetch
// that finds no room waits for it while its client waits, up to
// MediaWait, then is answered 503 with Retry-After.

// DefaultMediaServeBytes is how many bytes of tool media GET /ws/media
// serves at once by default (WSOptions.MediaServeBytes).
const DefaultMediaServeBytes = 64 << 20

// DefaultMediaWait is how long a media fetch waits for room by default
// before it is answered 503 (WSOptions.MediaWait).
const DefaultMediaWait = 5 * time.Second

// mediaRetryAfter is the Retry-After of a media fetch that found no room.
const mediaRetryAfter = "5"

// MediaPath is the path an item is fetched from, before its id.
const MediaPath = "/ws/media/"

// MediaFiles is what tools returned, by id (Conversations.ToolMedia):
// ToolMediaInfo without the bytes, read first.
type MediaFiles interface {
	ToolMediaInfo(ctx context.Context, id string) (*sessions.MediaFile, error)
	ToolMedia(ctx context.Context, id string) (*sessions.MediaFile, error)
}

// mediaHook is told how a media fetch moves (tests): Waiting when it
// found no room for its n bytes and waits, Serving when it holds room for
// them (before a byte is written; it may block), Done when it frees it
// or gave up waiting.
type mediaHook interface {
	Waiting(id string, n int64)
	Serving(id string, n int64)
	Done(id string, n int64)
}

// mediaAttachment is an item as a reply frame lists it.
type mediaAttachment struct {
	ID   string `json:"id"`
	Kind string `json:"kind"` // image, audio or file
	Mime string `json:"mime,omitempty"`
	Name string `json:"name,omitempty"`
	Size int64  `json:"size"`
	URL  string `json:"url"`
}

func mediaAttachments(media []sessions.Media) []mediaAttachment {
	if len(media) == 0 {
		return nil
	}
	out := make([]mediaAttachment, len(media))
	for i, m := range media {
		out[i] = mediaAttachment{ID: m.ID, Kind: m.Kind, Mime: m.Mime, Name: m.Name, Size: m.Size, URL: MediaPath + m.ID}
	}
	return out
}

// inlineMimes are the types served for the browser to show: pictures it
// draws and audio it plays, never a type that can run script (SVG, HTML).
// Everything else is a download, with the type the tool named.
var inlineMimes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true,
	"audio/mpeg": true, "audio/mp4": true, "audio/ogg": true, "audio/wav": true, "audio/webm": true, "audio/flac": true}

// MediaHandler serves GET /ws/media/{id}.
func (ws *WebSocket) MediaHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ws.sess.ToolMedia == nil {
			http.NotFound(w, r)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		principal, err := ws.mediaPrincipal(ctx, r)
		if errors.Is(err, sessions.ErrResumeExpired) {
			principal, err = "", nil // as no session: 401
		}
		switch {
		case err != nil:
			ws.log.WarnContext(ctx, "a media fetch could not be authenticated", slog.String("error", err.Error()))
			http.Error(w, "could not check the session token", http.StatusInternalServerError)
			return
		case principal == "":
			w.Header().Set("WWW-Authenticate", `Bearer realm="chatgate", Session realm="chatgate"`)
			http.Error(w, "a valid token or session is required", http.StatusUnauthorized)
			return
		}
		id := r.PathValue("id")
		info, err := ws.sess.ToolMedia.ToolMediaInfo(ctx, id)
		if err != nil {
			ws.log.WarnContext(ctx, "a media fetch failed", slog.String("error", err.Error()))
			http.Error(w, "could not read it", http.StatusServiceUnavailable)
			return
		}
		if info == nil || info.SessionKey != sessions.WebSocketKey(principal) {
			http.NotFound(w, r)
			return
		}
		// Room for its bytes before they are loaded.
		n := min(info.Size, ws.opts.MediaServeBytes)
		if !ws.serving.TryAcquire(n) {
			if h := ws.mediaHook; h != nil {
				h.Waiting(id, n)
			}
			wctx, wcancel := context.WithTimeout(ctx, ws.opts.MediaWait)
			err := ws.serving.Acquire(wctx, n)
			wcancel()
			if err != nil {
				if h := ws.mediaHook; h != nil {
					h.Done(id, 0)
				}
				if r.Context().Err() != nil {
					return // the client left
				}
				w.Header().Set("Retry-After", mediaRetryAfter)
				http.Error(w, "too many files are being served; try again shortly", http.StatusServiceUnavailable)
				return
			}
		}
		defer func() {
			if h := ws.mediaHook; h != nil {
				h.Done(id, n)
			}
			ws.serving.Release(n)
		}()
		if h := ws.mediaHook; h != nil {
			h.Serving(id, n)
		}
		f, err := ws.sess.ToolMedia.ToolMedia(ctx, id)
		if err != nil {
			ws.log.WarnContext(ctx, "a media fetch failed", slog.String("error", err.Error()))
			http.Error(w, "could not read it", http.StatusServiceUnavailable)
			return
		}
		if f == nil || f.SessionKey != info.SessionKey {
			http.NotFound(w, r) // deleted since (a purge)
			return
		}
		h := w.Header()
		// The bytes are a tool's: never run as anything in this origin.
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
		h.Set("Cache-Control", "private, max-age=3600")
		typ, _, perr := mime.ParseMediaType(f.Mime)
		disposition := "attachment"
		switch {
		case perr != nil || typ == "":
			typ = "application/octet-stream"
		case inlineMimes[typ]:
			disposition = "inline"
		}
		h.Set("Content-Type", typ)
		name := f.Name
		if name == "" {
			name = f.Kind + "-" + strconv.Itoa(int(f.Size))
		}
		h.Set("Content-Disposition", mime.FormatMediaType(disposition, map[string]string{"filename": name}))
		// A client that reads slowly holds its share of the bound only as
		// long as its bytes take at a modest pace: then the write fails
		// and the share is freed for others.
		writeTime := mediaWriteTime
		if ws.mediaWriteTime != nil {
			writeTime = ws.mediaWriteTime
		}
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(writeTime(f.Size)))
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.Data))
	})
}

// mediaWriteTime is how long an item of size bytes may take to be
// written to its client: 10 s, and a second more for every 128 KiB (a
// 10 MiB item: 90 s).
func mediaWriteTime(size int64) time.Duration {
	return 10*time.Second + time.Duration(size/(128<<10))*time.Second
}

// mediaPrincipal is who fetches: the principal of the request's auth
// token, else of its resume token (Authorization: Session TOKEN); ""
// when neither names one. A resume token in the URL (?session=) is not
// taken.
func (ws *WebSocket) mediaPrincipal(ctx context.Context, r *http.Request) (string, error) {
	if tok := requestToken(r); tok != "" && !ws.DevMode() {
		if p := ws.principalFor(tok); p != "" {
			return p, nil
		}
	}
	session, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Session ")
	if session = strings.TrimSpace(session); !ok || session == "" {
		return "", nil
	}
	return ws.sess.ResumePrincipal(ctx, Channel, session)
}
