// Package admin is chatgate's admin API and page under /admin/: search
// sessions, read a transcript with its turns, reset a session through the
// running session manager, export and purge conversations, watch live
// stats, report usage (tokens and cost by user, day and model, as JSON or
// CSV), see the operator's schedules with their next and last fires and a
// session's reminders, read, add and forget the notes kept about a user,
// and drain this replica. Every API call needs a bearer token of
// admin.tokens; the token's name is logged with every action. It reads
// the database through the roles of the query port it uses (Store),
// and resets, and reaches notes, through the running session manager.
package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/query"
)

// Store is what the admin API reads, and purges, stored conversations
// and usage through: the roles of the query port it uses. store.DB
// implements them; the admin API imports no store.
type Store interface {
	query.Conversations
	query.Exports
	query.UsageReports
	query.Purges
	query.Fires
	query.MediaFiles
}

// Options configures the admin API.
type Options struct {
	// Tokens maps an operator's name to their bearer token.
	Tokens  map[string]string
	Store   Store
	Manager *sessions.Manager
	// Turns counts finished turns for the turns-per-second figure; nil
	// reports none.
	Turns *TurnCounter
	// Connections reports the open WebSocket connections; nil when the
	// channel is off.
	Connections func() int
	Logger      *slog.Logger
	Now         func() time.Time

	// Timetable is the operator's schedules in force, which the
	// schedules endpoints report (nil: none).
	Timetable *sessions.Timetable

	// Reload re-reads the configuration as SIGHUP does (POST
	// /admin/api/reload); by names who asked. nil: the endpoint is absent.
	Reload func(by string) error
}

// tokenDigest is a token's SHA-256: tokens are compared as digests, so
// that every comparison takes the same time whatever the token's length.
type tokenDigest struct {
	name   string
	digest [sha256.Size]byte
}

// Admin serves the admin API and page.
type Admin struct {
	opts   Options
	log    *slog.Logger
	tokens []tokenDigest

	mu        sync.Mutex
	drainedBy string // who drained this replica; "" while serving
	drainedAt time.Time
}

// New returns the admin API for the tokens in opts (there must be at
// least one).
func New(opts Options) *Admin {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	a := &Admin{opts: opts, log: opts.Logger}
	for name, tok := range opts.Tokens {
		a.tokens = append(a.tokens, tokenDigest{name: name, digest: sha256.Sum256([]byte(tok))})
	}
	// A fixed order: which token matched does not show in how long the
	// loop takes either way, but a fixed order keeps it so across runs.
	slices.SortFunc(a.tokens, func(x, y tokenDigest) int { return strings.Compare(x.name, y.name) })
	return a
}

// Register mounts the API and the page with handle (such as
// gateway.Server.Handle).
func (a *Admin) Register(handle func(pattern string, h http.Handler)) {
	api := func(pattern string, fn func(w http.ResponseWriter, r *http.Request, who string)) {
		handle(pattern, a.auth(fn))
	}
	api("GET /admin/api/sessions", a.listSessions)
	api("POST /admin/api/sessions/{key}/reset", a.resetSession)
	api("GET /admin/api/conversations/{id}", a.transcript)
	api("GET /admin/api/conversations/{id}/export", a.export)
	api("DELETE /admin/api/conversations/{id}", a.purgeConversation)
	api("GET /admin/api/media/{id}", a.media)
	api("POST /admin/api/purge", a.purge)
	api("GET /admin/api/usage", a.usage)
	api("GET /admin/api/schedules", a.schedules)
	api("GET /admin/api/schedules/{name}/fires", a.scheduleFires)
	api("GET /admin/api/sessions/{key}/schedules", a.sessionSchedules)
	api("GET /admin/api/users/{user}/notes", a.notes)
	api("POST /admin/api/users/{user}/notes", a.remember)
	api("DELETE /admin/api/users/{user}/notes", a.forgetNotes)
	api("DELETE /admin/api/users/{user}/notes/{id}", a.forgetNote)
	api("GET /admin/api/stats", a.stats)
	api("POST /admin/api/drain", a.drain)
	api("POST /admin/api/undrain", a.undrain)
	if a.opts.Reload != nil {
		api("POST /admin/api/reload", a.reload)
	}
	// Anything else under /admin/api/ is a JSON 404 (after the token
	// check, so that the API's shape is not shown to anyone). One pattern
	// per method: a method-less one would conflict with "GET /admin/".
	for _, method := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		api(method+" /admin/api/", func(w http.ResponseWriter, r *http.Request, who string) {
			writeError(w, http.StatusNotFound, "no such admin endpoint: "+r.Method+" "+r.URL.Path)
		})
	}
	handle("GET /admin/", Page())
}

// who returns the name of the admin whose token the request bears. Every
// token is compared, the matching one or not, in constant time each.
func (a *Admin) who(r *http.Request) (string, bool) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return "", false
	}
	got := sha256.Sum256([]byte(tok))
	match := -1
	for i, t := range a.tokens {
		if subtle.ConstantTimeCompare(got[:], t.digest[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return "", false
	}
	return a.tokens[match].name, true
}

func (a *Admin) auth(fn func(w http.ResponseWriter, r *http.Request, who string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		name, ok := a.who(r)
		if !ok {
			a.log.Warn("admin request refused: missing or wrong token",
				slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("remote", r.RemoteAddr))
			w.Header().Set("WWW-Authenticate", `Bearer realm="chatgate admin"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong admin token (Authorization: Bearer TOKEN)")
			return
		}
		fn(w, r, name)
	})
}

// logAction logs one admin action with who did it. Reading the stats,
// which the page polls, logs at debug level.
func (a *Admin) logAction(r *http.Request, who, action, target string, attrs ...slog.Attr) {
	level := slog.LevelInfo
	if action == "stats" {
		level = slog.LevelDebug
	}
	all := append([]slog.Attr{slog.String("who", who), slog.String("action", action), slog.String("target", target),
		slog.String("remote", r.RemoteAddr)}, attrs...)
	a.log.LogAttrs(r.Context(), level, "admin action", all...)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// storeError answers a failure of the store.
func (a *Admin) storeError(w http.ResponseWriter, err error) {
	if errors.Is(err, sessions.ErrShuttingDown) {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	a.log.Error("admin: storage", slog.String("error", err.Error()))
	writeError(w, http.StatusInternalServerError, err.Error())
}

// intParam reads a non-negative integer query parameter, def when absent.
func intParam(r *http.Request, name string, def, maxV int) (int, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > maxV {
		return 0, fmt.Errorf("%s: want a whole number from 0 to %d, got %q", name, maxV, s)
	}
	return n, nil
}

// Session list limits.
const (
	defaultLimit = 50
	maxLimit     = 1000
)

// sessionList is the answer of GET /admin/api/sessions.
type sessionList struct {
	Conversations []sessions.Conversation `json:"conversations"`
	Total         int64                   `json:"total"`
	Limit         int                     `json:"limit"`
	Offset        int                     `json:"offset"`
	// NextOffset is the offset of the next page; absent on the last.
	NextOffset *int `json:"next_offset,omitempty"`
}

func (a *Admin) listSessions(w http.ResponseWriter, r *http.Request, who string) {
	q := r.URL.Query()
	f := query.ListFilter{SessionKey: q.Get("key"), KeyContains: q.Get("q"), Channel: q.Get("channel"),
		UserID: q.Get("user"), Status: q.Get("status")}
	switch f.Status {
	case "", sessions.StatusActive, sessions.StatusArchived:
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("status: want active or archived, got %q", f.Status))
		return
	}
	var err error
	if f.Limit, err = intParam(r, "limit", defaultLimit, maxLimit); err == nil && f.Limit == 0 {
		err = fmt.Errorf("limit: want a whole number from 1 to %d, got 0", maxLimit)
	}
	if err == nil {
		f.Offset, err = intParam(r, "offset", 0, 1<<30)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	a.logAction(r, who, "list", r.URL.RawQuery)
	total, err := a.opts.Store.CountConversations(r.Context(), f)
	if err != nil {
		a.storeError(w, err)
		return
	}
	convs, err := a.opts.Store.ListConversations(r.Context(), f)
	if err != nil {
		a.storeError(w, err)
		return
	}
	out := sessionList{Conversations: convs, Total: total, Limit: f.Limit, Offset: f.Offset}
	if out.Conversations == nil {
		out.Conversations = []sessions.Conversation{}
	}
	if next := f.Offset + len(convs); int64(next) < total && len(convs) > 0 {
		out.NextOffset = &next
	}
	writeJSON(w, http.StatusOK, out)
}

// loadExport reads a conversation, answering 404 when there is none.
func (a *Admin) loadExport(w http.ResponseWriter, r *http.Request) *query.Export {
	id := r.PathValue("id")
	t, err := a.opts.Store.ExportConversation(r.Context(), id)
	if err != nil {
		a.storeError(w, err)
		return nil
	}
	if t == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no conversation %q", id))
	}
	return t
}

func (a *Admin) transcript(w http.ResponseWriter, r *http.Request, who string) {
	a.logAction(r, who, "transcript", r.PathValue("id"))
	if t := a.loadExport(w, r); t != nil {
		writeJSON(w, http.StatusOK, t)
	}
}

func (a *Admin) export(w http.ResponseWriter, r *http.Request, who string) {
	format := r.URL.Query().Get("format")
	if format == "" {
		format = query.FormatJSON
	}
	ctype := map[string]string{
		query.FormatJSON:     "application/json; charset=utf-8",
		query.FormatMarkdown: "text/markdown; charset=utf-8",
		query.FormatText:     "text/plain; charset=utf-8",
	}[format]
	if ctype == "" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("format: want json, markdown or text, got %q", format))
		return
	}
	id := r.PathValue("id")
	a.logAction(r, who, "export", id, slog.String("format", format))
	t := a.loadExport(w, r)
	if t == nil {
		return
	}
	ext := map[string]string{query.FormatJSON: "json", query.FormatMarkdown: "md", query.FormatText: "txt"}[format]
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="conversation-%s.%s"`, safeName(id), ext))
	if err := t.Write(w, format); err != nil {
		a.log.Warn("admin: writing an export", slog.String("error", err.Error()))
	}
}

// safeName keeps an id usable in a file name header.
func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') {
			return r
		}
		return '_'
	}, s)
}

func (a *Admin) resetSession(w http.ResponseWriter, r *http.Request, who string) {
	key := r.PathValue("key")
	a.logAction(r, who, "reset", key)
	conv, err := a.opts.Store.ActiveConversation(r.Context(), key)
	if err != nil {
		a.storeError(w, err)
		return
	}
	if conv == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("session key %q has no active conversation", key))
		return
	}
	// Through the running manager, as a user's /new: its cache drops the
	// conversation and the key's connected clients are told.
	ev, err := a.opts.Manager.Reset(r.Context(), sessions.Inbound{Channel: conv.Channel, SessionKey: key,
		UserID: conv.UserID, ChatID: conv.ChatID})
	if err != nil {
		a.storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"session_key": key, "archived": ev.OldConversation,
		"conversation": ev.NewConversation})
}

func (a *Admin) purgeConversation(w http.ResponseWriter, r *http.Request, who string) {
	id := r.PathValue("id")
	a.logAction(r, who, "purge", id)
	conv, err := a.opts.Store.Conversation(r.Context(), id)
	if err != nil {
		a.storeError(w, err)
		return
	}
	if conv == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no conversation %q", id))
		return
	}
	if conv.Status != sessions.StatusArchived {
		writeError(w, http.StatusConflict, fmt.Sprintf("conversation %s is active: reset its session first, then purge it", id))
		return
	}
	ok, err := a.opts.Store.PurgeConversation(r.Context(), id)
	if err != nil {
		a.storeError(w, err)
		return
	}
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no archived conversation %q", id))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"purged": 1})
}

// purge deletes archived conversations archived before a time, as the
// retention purge does: ?older_than_days=N or ?before=RFC3339.
func (a *Admin) purge(w http.ResponseWriter, r *http.Request, who string) {
	q := r.URL.Query()
	var before time.Time
	switch days, at := q.Get("older_than_days"), q.Get("before"); {
	case days != "" && at != "":
		writeError(w, http.StatusBadRequest, "give older_than_days or before, not both")
		return
	case days != "":
		n, err := intParam(r, "older_than_days", 0, 100_000)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		before = a.opts.Now().UTC().AddDate(0, 0, -n)
	case at != "":
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("before: want an RFC 3339 time such as 2026-01-02T15:04:05Z, got %q", at))
			return
		}
		before = t
	default:
		writeError(w, http.StatusBadRequest, "purge needs older_than_days=N or before=TIME (archived conversations archived before it are deleted)")
		return
	}
	a.logAction(r, who, "purge", "archived before "+before.UTC().Format(time.RFC3339))
	n, err := a.opts.Store.Purge(r.Context(), before)
	if err != nil {
		a.storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"purged": n, "archived_before": before.UTC()})
}

// Stats is the answer of GET /admin/api/stats: this replica's figures.
type Stats struct {
	Replica string `json:"replica"`
	// TurnsLastMinute are the turns this replica finished in the last 60
	// seconds; TurnsPerSecond is their rate.
	TurnsLastMinute int     `json:"turns_last_minute"`
	TurnsPerSecond  float64 `json:"turns_per_second"`
	RunningTurns    int     `json:"running_turns"`
	// WaitingMessages are stored user messages whose turn has not started
	// (debounce, or the turn before them), in WaitingSessions keys.
	WaitingMessages int `json:"waiting_messages"`
	WaitingSessions int `json:"waiting_sessions"`
	// WaitingOnStorage are the turns waiting for the database: stored
	// messages whose turn could not start, replies kept until they can be
	// stored, conversations to look at again (sessions.WaitingOnStorage).
	WaitingOnStorage int `json:"waiting_on_storage"`
	// StorageDownSince is set while every storage call fails.
	StorageDownSince     *time.Time `json:"storage_down_since,omitempty"`
	WebSocketConnections int        `json:"websocket_connections"`
	ReplicasAlive        []string   `json:"replicas_alive"`
	Draining             bool       `json:"draining"`
	DrainedBy            string     `json:"drained_by,omitempty"`
}

func (a *Admin) stats(w http.ResponseWriter, r *http.Request, who string) {
	a.logAction(r, who, "stats", "")
	s := Stats{Replica: a.opts.Manager.ReplicaID(), RunningTurns: a.opts.Manager.Standing().RunningTurns()}
	s.WaitingMessages, s.WaitingSessions = a.opts.Manager.Standing().WaitingMessages()
	s.WaitingOnStorage = a.opts.Manager.WaitingOnStorage()
	if since, down := a.opts.Manager.Health().StorageDown(); down {
		s.StorageDownSince = &since
	}
	if a.opts.Turns != nil {
		s.TurnsLastMinute = a.opts.Turns.LastMinute()
		s.TurnsPerSecond = float64(s.TurnsLastMinute) / 60
	}
	if a.opts.Connections != nil {
		s.WebSocketConnections = a.opts.Connections()
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	alive, err := a.opts.Manager.Standing().AliveReplicas(ctx)
	if err != nil {
		a.storeError(w, err)
		return
	}
	s.ReplicasAlive = alive
	a.mu.Lock()
	s.Draining, s.DrainedBy = a.drainedBy != "", a.drainedBy
	a.mu.Unlock()
	writeJSON(w, http.StatusOK, s)
}

func (a *Admin) drain(w http.ResponseWriter, r *http.Request, who string) {
	a.logAction(r, who, "drain", a.opts.Manager.ReplicaID())
	a.mu.Lock()
	if a.drainedBy == "" {
		a.drainedBy, a.drainedAt = who, a.opts.Now()
	}
	by := a.drainedBy
	a.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"draining": true, "drained_by": by})
}

func (a *Admin) undrain(w http.ResponseWriter, r *http.Request, who string) {
	a.logAction(r, who, "undrain", a.opts.Manager.ReplicaID())
	a.mu.Lock()
	a.drainedBy = ""
	a.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"draining": false})
}

// Drained reports whether an admin drained this replica.
func (a *Admin) Drained() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.drainedBy != ""
}

// ReadyCheck is the readiness check of an admin drain: /readyz answers
// 503 while this replica is drained.
func (a *Admin) ReadyCheck() func() error {
	return func() error {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.drainedBy != "" {
			return fmt.Errorf("drained by %s since %s", a.drainedBy, a.drainedAt.UTC().Format(time.RFC3339))
		}
		return nil
	}
}

// Gate answers 503 instead of h while this replica is drained: new
// WebSocket connections and Telegram webhook calls go to other replicas
// (Telegram sends a refused update again). Connections already open stay.
func (a *Admin) Gate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.Drained() {
			w.Header().Set("Retry-After", "5")
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	})
}
