package telegramtest

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Private chats, as the Bot API has them: a bot cannot start a
// conversation. With RefuseUnstarted, a send (sendMessage,
// sendMessageDraft, sendChatAction) to a user's private chat — a
// positive chat_id — answers 403 "Forbidden: bot can't initiate
// conversation with a user" until that user has written to the bot there
// (an update from their private chat was queued: they pressed Start, or
// sent anything; or Started). Without it every user counts as having
// started the bot long ago — most tests' premise, and the only one for
// updates a test posts to a webhook, which the server never sees. Always,
// a send answers 403 "Forbidden: bot was blocked by the user" while the
// user blocks the bot (Block; a message from them afterwards — Restart
// sends /start — unblocks it).

// privateState is the users who have a private chat with the bot, and
// those who blocked it.
type privateState struct {
	strict  bool // RefuseUnstarted
	started map[int64]bool
	blocked map[int64]bool
}

// RefuseUnstarted makes sends to the private chat of a user who never
// wrote to the bot privately answer 403, as Telegram does.
func (a *Server) RefuseUnstarted() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.private.strict = true
}

// notePrivate marks the private chat an update comes from (or, for a
// callback query, whose message it is on) as started, and unblocked.
// Called under a.mu, for every update queued.
func (a *Server) notePrivate(u map[string]any) {
	for _, body := range u {
		m, ok := body.(map[string]any)
		if !ok {
			continue
		}
		if inner, ok := m["message"].(map[string]any); ok {
			m = inner // a callback query's message
		}
		chat, _ := m["chat"].(map[string]any)
		if chat["type"] != "private" {
			continue
		}
		id, ok := chat["id"].(int64)
		if !ok {
			continue
		}
		if a.private.started == nil {
			a.private.started = map[int64]bool{}
		}
		a.private.started[id] = true
		delete(a.private.blocked, id)
	}
}

// Started marks user as having a private chat with the bot already (they
// wrote to it before the test began), without an update.
func (a *Server) Started(user int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.private.started == nil {
		a.private.started = map[int64]bool{}
	}
	a.private.started[user] = true
}

// Block makes user block the bot: sends to their private chat answer 403
// until they write to it again.
func (a *Server) Block(user int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.private.blocked == nil {
		a.private.blocked = map[int64]bool{}
	}
	a.private.blocked[user] = true
}

// refusePrivate answers 403 as the Bot API does for a send to a user's
// private chat the bot may not write to, and reports whether it did.
// Called under a.mu.
func (a *Server) refusePrivate(w http.ResponseWriter, r *http.Request) bool {
	chat, err := strconv.ParseInt(r.FormValue("chat_id"), 10, 64)
	why := ""
	switch {
	case err != nil || chat <= 0:
		return false // a group, a channel, or an @username: not a user's chat
	case a.private.blocked[chat]:
		why = "bot was blocked by the user"
	case a.private.strict && !a.private.started[chat]:
		why = "bot can't initiate conversation with a user"
	default:
		return false
	}
	w.WriteHeader(http.StatusForbidden)
	json.NewEncoder(w).Encode(map[string]any{"ok": false, "error_code": 403, "description": "Forbidden: " + why})
	return true
}
