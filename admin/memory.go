package admin

// Memory: the notes kept about a user across conversations
// (sessions.Memory), by user key — a session key without its Telegram
// topic, and in a group chat its members share, a member's own
// (sessions.MemoryUser). The operator reads them, forgets one or all, and
// adds one, written as the operator (ledger.NoteByOperator), which is
// kept where the user's memory is off too. All go through the running
// session manager's Memory, as the user's frames and commands do: the
// next turn, on any replica, reads the notes as they are after.

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// maxNoteBody bounds the body of a note the operator adds.
const maxNoteBody = 16 << 10

// userNotes is the answer of GET /admin/api/users/{user}/notes.
type userNotes struct {
	User string `json:"user"`
	// Enabled tells whether the user's memory is on: their turns read
	// the notes, and they and the model may add some.
	Enabled bool          `json:"enabled"`
	Notes   []ledger.Note `json:"notes"`
}

// noteUser is the request's user key and its channel, or false with a
// 400 written when it is no user whose notes can be kept.
func noteUser(w http.ResponseWriter, r *http.Request) (user, channel string, ok bool) {
	user = r.PathValue("user")
	channel, rest, _ := strings.Cut(user, ":")
	switch {
	case (channel != "websocket" && channel != "telegram") || rest == "":
		writeError(w, http.StatusBadRequest, fmt.Sprintf("user: want a user key such as websocket:alice or telegram:dm:42, got %q", user))
	case len(user) > 255:
		writeError(w, http.StatusBadRequest, "user: a user key is at most 255 bytes")
	case ledger.UsageUser(user) != user:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("user: %q names a Telegram topic; a user's topics share their notes: use %q", user, ledger.UsageUser(user)))
	case ledger.NoteMembers(user) != "":
		writeError(w, http.StatusBadRequest, fmt.Sprintf("user: %q is a group chat its members share; each member has notes of their own: use %sUSER_ID", user, ledger.NoteMembers(user)))
	default:
		return user, channel, true
	}
	return "", "", false
}

// notes answers GET /admin/api/users/{user}/notes: the user's notes,
// newest first.
func (a *Admin) notes(w http.ResponseWriter, r *http.Request, who string) {
	user, channel, ok := noteUser(w, r)
	if !ok {
		return
	}
	a.logAction(r, who, "notes", user)
	mem := a.opts.Manager.Memory()
	list, err := mem.List(r.Context(), user)
	if err != nil {
		a.storeError(w, err)
		return
	}
	if list == nil {
		list = []ledger.Note{}
	}
	writeJSON(w, http.StatusOK, userNotes{User: user, Enabled: mem.Enabled(channel, user), Notes: list})
}

// remember answers POST /admin/api/users/{user}/notes with {"text": "…"}:
// a note written as the operator, answered with the note kept (201).
func (a *Admin) remember(w http.ResponseWriter, r *http.Request, who string) {
	user, channel, ok := noteUser(w, r)
	if !ok {
		return
	}
	var body struct {
		Text *string `json:"text"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxNoteBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || dec.More() {
		writeError(w, http.StatusBadRequest, fmt.Sprintf(`want one JSON object {"text": "…"}: %v`, err))
		return
	}
	if body.Text == nil {
		writeError(w, http.StatusBadRequest, `want {"text": "…"}: the note's text`)
		return
	}
	a.logAction(r, who, "remember", user)
	n, err := a.opts.Manager.Memory().Remember(r.Context(), sessions.NoteRequest{Channel: channel, User: user, Text: *body.Text,
		Author: ledger.NoteByOperator})
	switch {
	case errors.Is(err, sessions.ErrBadNote):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, sessions.ErrTooManyNotes):
		writeError(w, http.StatusConflict, err.Error())
	case err != nil:
		a.storeError(w, err)
	default:
		writeJSON(w, http.StatusCreated, n)
	}
}

// forgetNote answers DELETE /admin/api/users/{user}/notes/{id}.
func (a *Admin) forgetNote(w http.ResponseWriter, r *http.Request, who string) {
	user, _, ok := noteUser(w, r)
	if !ok {
		return
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("id: want a note's id, a positive number, got %q", r.PathValue("id")))
		return
	}
	a.logAction(r, who, "forget", user, slog.Int64("note", id))
	switch err := a.opts.Manager.Memory().Forget(r.Context(), user, id); {
	case errors.Is(err, sessions.ErrNoSuchNote):
		writeError(w, http.StatusNotFound, fmt.Sprintf("%s has no note %d (forgotten already?)", user, id))
	case err != nil:
		a.storeError(w, err)
	default:
		writeJSON(w, http.StatusOK, map[string]any{"forgotten": 1})
	}
}

// forgetNotes answers DELETE /admin/api/users/{user}/notes: every note
// of the user.
func (a *Admin) forgetNotes(w http.ResponseWriter, r *http.Request, who string) {
	user, _, ok := noteUser(w, r)
	if !ok {
		return
	}
	a.logAction(r, who, "forget", user, slog.String("note", "all"))
	n, err := a.opts.Manager.Memory().ForgetAll(r.Context(), user)
	if err != nil {
		a.storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"forgotten": n})
}
