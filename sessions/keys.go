package sessions

import "strconv"

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
