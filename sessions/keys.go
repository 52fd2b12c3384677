package sessions

import (
	"strconv"
	"strings"
)

// Session keys name who a conversation belongs to. They are plain strings,
// stable across restarts and replicas.

// TelegramDMKey is the key of a private chat with a Telegram user.
func TelegramDMKey(userID int64) string {
	return "telegram:dm:" + strconv.FormatInt(userID, 10)
}

// TelegramGroupKey is the key of one member's conversation in a group, or of
// the whole group when perUser is false (group_scope: chat).
func TelegramGroupKey(chatID, userID int64, perUser bool) string {
	k := "telegram:group:" + strconv.FormatInt(chatID, 10)
	if perUser {
		k += ":" + strconv.FormatInt(userID, 10)
	}
	return k
}

// WebSocketKey is the key of a WebSocket principal.
func WebSocketKey(principal string) string { return "websocket:" + principal }

// TelegramTopicKey is the key of a topic's conversation in a chat with
// topics (a forum supergroup, or a private chat with topics): key, the
// chat's key (TelegramDMKey or TelegramGroupKey), with the topic's thread
// id. The General topic, thread 0, keeps the chat's own key.
func TelegramTopicKey(key string, thread int) string {
	if thread == 0 {
		return key
	}
	return key + ":topic:" + strconv.Itoa(thread)
}

// AddressOf is where a session key's replies go, read back from the key
// (for a conversation no message has opened yet, such as a fire's to a
// user who opted in): the user id and the chat as the channel's Delivery
// names it — Telegram's "CHAT" or "CHAT/THREAD", a WebSocket principal's
// empty. ok is false for a key of another form.
func AddressOf(key string) (userID, chatID string, ok bool) {
	if p, found := strings.CutPrefix(key, "websocket:"); found {
		return p, "", p != ""
	}
	rest, found := strings.CutPrefix(key, "telegram:")
	if !found {
		return "", "", false
	}
	thread := ""
	if i := strings.Index(rest, ":topic:"); i >= 0 {
		rest, thread = rest[:i], rest[i+len(":topic:"):]
		if n, err := strconv.Atoi(thread); err != nil || n <= 0 {
			return "", "", false
		}
	}
	parts := strings.Split(rest, ":")
	valid := func(s string) bool { _, err := strconv.ParseInt(s, 10, 64); return err == nil }
	switch {
	case len(parts) == 2 && parts[0] == "dm" && valid(parts[1]):
		userID, chatID = parts[1], parts[1]
	case len(parts) == 2 && parts[0] == "group" && valid(parts[1]):
		chatID = parts[1]
	case len(parts) == 3 && parts[0] == "group" && valid(parts[1]) && valid(parts[2]):
		userID, chatID = parts[2], parts[1]
	default:
		return "", "", false
	}
	if thread != "" {
		chatID += "/" + thread
	}
	return userID, chatID, true
}
