package telegramtest

import "strings"

// The messages of updates as Telegram sends them, by kind of chat.

// DM is a private-chat message from user.
func DM(user int64, text string) map[string]any {
	m := map[string]any{
		"from": map[string]any{"id": user, "is_bot": false, "first_name": "U"},
		"chat": map[string]any{"id": user, "type": "private"},
		"text": text,
	}
	if strings.HasPrefix(text, "/") {
		cmd, _, _ := strings.Cut(text, " ")
		m["entities"] = []map[string]any{{"type": "bot_command", "offset": 0, "length": len(cmd)}}
	}
	return m
}

// Group is a group message; a mention of the bot gets its entity.
func Group(chat, user int64, text string) map[string]any {
	m := DM(user, text)
	m["chat"] = map[string]any{"id": chat, "type": "supergroup", "title": "G"}
	if i := strings.Index(text, "@"+BotName); i >= 0 && !strings.HasPrefix(text, "/") {
		m["entities"] = []map[string]any{{"type": "mention", "offset": len([]rune(text[:i])), "length": len(BotName) + 1}}
	}
	return m
}

// Topic is a message from user in topic thread of forum supergroup chat; a
// mention of the bot gets its entity, as in Group.
func Topic(chat, user int64, thread int, text string) map[string]any {
	m := ForumGeneral(chat, user, text)
	m["message_thread_id"] = thread
	m["is_topic_message"] = true
	return m
}

// ForumGeneral is a message from user in the General topic of forum
// supergroup chat, which Telegram sends without a message_thread_id.
func ForumGeneral(chat, user int64, text string) map[string]any {
	m := Group(chat, user, text)
	m["chat"].(map[string]any)["is_forum"] = true
	return m
}

// PrivateTopic is a message from user in topic thread of their private
// chat with the bot (Bot API 9.x topics in private chats).
func PrivateTopic(user int64, thread int, text string) map[string]any {
	m := DM(user, text)
	m["message_thread_id"] = thread
	m["is_topic_message"] = true
	return m
}
