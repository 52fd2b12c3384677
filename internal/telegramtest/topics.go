package telegramtest

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Forum topics, as the Bot API keeps them: a chat has topics (a forum
// supergroup, or a private chat with topics), each open, closed or
// deleted. A send with a message_thread_id must name an open topic of its
// chat; without one it goes to the chat itself (a forum's General topic).

type topicState int

const (
	topicOpen topicState = iota + 1
	topicClosed
	topicDeleted
)

// topics maps a chat that has topics to the state of each topic the
// server knows in it.
type topics map[int64]map[int]topicState

// noteTopic registers the topic of a pushed topic message as open, unless
// the server already knows it, and so marks its chat as having topics.
// Called under a.mu.
func (a *Server) noteTopic(message map[string]any) {
	if message["is_topic_message"] != true {
		return
	}
	chat, _ := message["chat"].(map[string]any)
	id, ok := chat["id"].(int64)
	thread, ok2 := message["message_thread_id"].(int)
	if !ok || !ok2 {
		a.t.Errorf("topic message without an int64 chat id and an int message_thread_id: %v", message)
		return
	}
	if _, known := a.topics[id][thread]; !known {
		a.setTopic(id, thread, topicOpen)
	}
}

// setTopic sets the state of a topic, registering it if unknown; a
// deleted topic stays deleted, as in Telegram. Called under a.mu.
func (a *Server) setTopic(chat int64, thread int, s topicState) {
	if a.topics == nil {
		a.topics = topics{}
	}
	if a.topics[chat] == nil {
		a.topics[chat] = map[int]topicState{}
	}
	if a.topics[chat][thread] != topicDeleted {
		a.topics[chat][thread] = s
	}
}

// CloseTopic closes a topic: sends into it answer 400 TOPIC_CLOSED until
// ReopenTopic.
func (a *Server) CloseTopic(chat int64, thread int) {
	a.mu.Lock()
	a.setTopic(chat, thread, topicClosed)
	a.mu.Unlock()
}

// ReopenTopic opens a closed topic again.
func (a *Server) ReopenTopic(chat int64, thread int) {
	a.mu.Lock()
	a.setTopic(chat, thread, topicOpen)
	a.mu.Unlock()
}

// DeleteTopic deletes a topic for good: sends into it answer 400 "message
// thread not found".
func (a *Server) DeleteTopic(chat int64, thread int) {
	a.mu.Lock()
	a.setTopic(chat, thread, topicDeleted)
	a.mu.Unlock()
}

// threadOf is the message_thread_id r was sent with, 0 for none.
func threadOf(r *http.Request) int {
	n, _ := strconv.Atoi(r.FormValue("message_thread_id"))
	return n
}

// refuseThread answers 400 as the Bot API does when r names a topic its
// chat cannot take — "message thread not found" for one the chat does not
// have (or a chat without topics), "TOPIC_CLOSED" for a closed one — and
// reports whether it did. Send methods call it, under a.mu, before taking
// the message.
func (a *Server) refuseThread(w http.ResponseWriter, r *http.Request) bool {
	thread := threadOf(r)
	if thread == 0 {
		return false
	}
	chat, _ := strconv.ParseInt(r.FormValue("chat_id"), 10, 64)
	why := ""
	switch a.topics[chat][thread] {
	case topicOpen:
		return false
	case topicClosed:
		why = "TOPIC_CLOSED"
	default: // unknown or deleted
		why = "message thread not found"
	}
	w.WriteHeader(http.StatusBadRequest)
	json.NewEncoder(w).Encode(map[string]any{"ok": false, "error_code": 400, "description": "Bad Request: " + why})
	return true
}

// botMessage is the Message the Bot API answers a send or an edit with,
// carrying its topic when it is in one.
func botMessage(chat int64, id, thread int, text string) map[string]any {
	m := map[string]any{"message_id": id, "date": 1, "chat": map[string]any{"id": chat, "type": "private"},
		"from": map[string]any{"id": BotID, "is_bot": true, "first_name": "Gate"}, "text": text}
	if thread != 0 {
		m["message_thread_id"] = thread
		m["is_topic_message"] = true
	}
	return m
}
