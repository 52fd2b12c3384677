package gateway

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/chatgate/chatgate/sessions"
)

// Media from tools over the WebSocket channel: a reply frame lists what
// the turn's tool calls returned (attachments: id, kind, mime, name, size,
// url), and the client fetches each from its url, GET /ws/media/{id},
// authenticated as it authenticates on /ws: the principal's auth token
// (Authorization: Bearer, or ?token=), or the resume token ready gave it
// (?session=), which is only ever issued to the principal it names. Only
// the principal whose conversation it is gets the bytes; anyone else gets
// 404, as for an id that does not exist.

// MediaPath is the path an item is fetched from, before its id.
const MediaPath = "/ws/media/"

// MediaFiles is what tools returned, by id (Conversations.ToolMedia).
type MediaFiles interface {
	ToolMedia(ctx context.Context, id string) (*sessions.MediaFile, error)
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
			w.Header().Set("WWW-Authenticate", `Bearer realm="chatgate"`)
			http.Error(w, "a valid token or session is required", http.StatusUnauthorized)
			return
		}
		f, err := ws.sess.ToolMedia.ToolMedia(ctx, r.PathValue("id"))
		if err != nil {
			ws.log.WarnContext(ctx, "a media fetch failed", slog.String("error", err.Error()))
			http.Error(w, "could not read it", http.StatusServiceUnavailable)
			return
		}
		if f == nil || f.SessionKey != sessions.WebSocketKey(principal) {
			http.NotFound(w, r)
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
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.Data))
	})
}

// mediaPrincipal is who fetches: the principal of the request's auth
// token, else of its resume token (?session=); "" when neither names one.
func (ws *WebSocket) mediaPrincipal(ctx context.Context, r *http.Request) (string, error) {
	if tok := requestToken(r); tok != "" && !ws.DevMode() {
		if p := ws.principalFor(tok); p != "" {
			return p, nil
		}
	}
	session := r.URL.Query().Get("session")
	if session == "" {
		return "", nil
	}
	return ws.sess.ResumePrincipal(ctx, Channel, session)
}
