package admin

import (
	"bytes"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"time"
)

// media serves GET /admin/api/media/{id}: an item a tool returned, as a
// download whatever its type (a tool's bytes are never shown in the
// admin page's origin). The transcript lists each call's media with
// their ids.
func (a *Admin) media(w http.ResponseWriter, r *http.Request, who string) {
	id := r.PathValue("id")
	a.logAction(r, who, "media", id)
	f, err := a.opts.Store.ToolMedia(r.Context(), id)
	if err != nil {
		a.log.Warn("admin: reading media", slog.String("error", err.Error()))
		writeError(w, http.StatusServiceUnavailable, "could not read it")
		return
	}
	if f == nil {
		writeError(w, http.StatusNotFound, "no media "+strconv.Quote(id))
		return
	}
	typ, _, perr := mime.ParseMediaType(f.Mime)
	if perr != nil || typ == "" {
		typ = "application/octet-stream"
	}
	name := f.Name
	if name == "" {
		name = f.Kind + "-" + safeName(f.ID)
	}
	h := w.Header()
	h.Set("Content-Type", typ)
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.Data))
}
