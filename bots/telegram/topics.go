package telegram

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
)

// Forum topics. A forum supergroup, and a private chat with topics, is
// shown by Telegram's clients as one chat per topic, and people use it
// that way: each topic is a conversation of its own (its session key
// carries the topic), and everything the bot sends for a turn goes to
// the topic it answers. The General topic is the chat itself.
//
// go-telegram-bot-api v5.5.1 predates topics (Bot API 6.3): an update's
// topic fields are read from its JSON beside the library's decoding, and
// the thread goes out as a parameter of the library's raw request.

// update is a Bot API update as the bot reads it: the library's decoding,
// the topic of its message, and the JSON it came as (a held update is
// stored as that, so nothing the library does not know is lost).
type update struct {
	tgbotapi.Update
	thread int             // the message's topic: message_thread_id of a topic message
	raw    json.RawMessage // as Telegram sent it
	// editThread is the topic of the edited message (edited_message).
	editThread int
	// callbackThread is the topic of the message whose button was
	// tapped (callback_query).
	callbackThread int
	// quote, editQuote are the part of the replied-to message the message
	// (edited_message) quotes: Message.quote's text, which the library
	// does not read.
	quote, editQuote string
}

// topicFields are a message's fields about its topic. message_thread_id
// alone does not make a topic: in a group without topics it names the
// thread of replies a message is in, which is no conversation of its own.
type topicFields struct {
	Thread  int  `json:"message_thread_id"`
	IsTopic bool `json:"is_topic_message"`
}

// messageFields are a message's fields the library does not read: its
// topic and the quote (TextQuote) of the message it replies to.
type messageFields struct {
	topicFields
	Quote *struct {
		Text string `json:"text"`
	} `json:"quote"`
}

// quoteText is the text of a message's quote, "" without one.
func (f *messageFields) quoteText() string {
	if f == nil || f.Quote == nil {
		return ""
	}
	return f.Quote.Text
}

func (u *update) UnmarshalJSON(data []byte) error {
	var topics struct {
		Message *messageFields `json:"message"`
		Edited  *messageFields `json:"edited_message"`
		Tap     *struct {
			Message *topicFields `json:"message"`
		} `json:"callback_query"`
	}
	if err := json.Unmarshal(data, &u.Update); err != nil {
		return err
	}
	if err := json.Unmarshal(data, &topics); err != nil {
		return err
	}
	u.thread, u.editThread, u.callbackThread = 0, 0, 0
	u.quote, u.editQuote = topics.Message.quoteText(), topics.Edited.quoteText()
	if t := topics.Message; t != nil && t.IsTopic {
		u.thread = t.Thread
	}
	if t := topics.Edited; t != nil && t.IsTopic {
		u.editThread = t.Thread
	}
	if t := topics.Tap; t != nil && t.Message != nil && t.Message.IsTopic {
		u.callbackThread = t.Message.Thread
	}
	u.raw = append(json.RawMessage(nil), data...)
	return nil
}

func (u update) MarshalJSON() ([]byte, error) {
	if u.raw != nil {
		return u.raw, nil
	}
	return json.Marshal(u.Update)
}

// message is the update's message with its topic — or, for an
// edited_message, the edited message (edit set) — or nil.
func (u update) message() *message {
	switch {
	case u.Message != nil:
		return &message{Message: u.Message, thread: u.thread, quote: u.quote}
	case u.EditedMessage != nil:
		return &message{Message: u.EditedMessage, thread: u.editThread, edit: true, quote: u.editQuote}
	}
	return nil
}

// message is an incoming message and the topic it was written in.
type message struct {
	*tgbotapi.Message
	thread int    // 0: the General topic, or a chat without topics
	edit   bool   // an edit of the message MessageID (edited_message)
	quote  string // the part of ReplyToMessage it quotes, if it quotes
	// media is what the message carries besides its text, once read
	// (process): kept across the retries of a message not yet stored.
	media *inbound
	// album, for an album's message (albumMessage), is its parts, lowest
	// message id first; the message itself is the first part's, with the
	// album's caption.
	album []*message
}

// quoted is the text m answers: the part it quotes, else the text (or
// caption) of the message it replies to; "" when it replies to nothing
// with text (a topic's messages reply to its creation, which has none).
func (m *message) quoted() string {
	if m.quote != "" {
		return m.quote
	}
	if r := m.ReplyToMessage; r != nil {
		if r.Text != "" {
			return r.Text
		}
		return r.Caption
	}
	return ""
}

// to is where the bot's messages about m go: its chat and topic.
func (m *message) to() place { return place{chat: m.Chat.ID, thread: m.thread} }

// place is where a message is sent: a chat, and a topic in it (0 for
// the General topic or a chat without topics).
type place struct {
	chat   int64
	thread int
}

// String is the place as a conversation stores it (sessions.Inbound's
// ChatID): the chat id, and "/thread" for a topic.
func (p place) String() string {
	s := strconv.FormatInt(p.chat, 10)
	if p.thread != 0 {
		s += "/" + strconv.Itoa(p.thread)
	}
	return s
}

// parsePlace reads a place String wrote.
func parsePlace(s string) (place, error) {
	chat, thread, topic := strings.Cut(s, "/")
	var p place
	var err error
	if p.chat, err = strconv.ParseInt(chat, 10, 64); err != nil {
		return place{}, fmt.Errorf("chat id %q", s)
	}
	if topic {
		if p.thread, err = strconv.Atoi(thread); err != nil || p.thread <= 0 {
			return place{}, fmt.Errorf("chat id %q", s)
		}
	}
	return p, nil
}

// params are the request parameters that address p.
func (p place) params() tgbotapi.Params {
	params := tgbotapi.Params{"chat_id": strconv.FormatInt(p.chat, 10)}
	params.AddNonZero("message_thread_id", p.thread)
	return params
}

// topicGone reports whether Telegram refused a message because its topic
// was closed or deleted: the message then goes to the General topic.
func topicGone(err error) bool {
	var apiErr *tgbotapi.Error
	if !errors.As(err, &apiErr) || apiErr.Code != http.StatusBadRequest {
		return false
	}
	msg := strings.ToLower(apiErr.Message)
	return strings.Contains(msg, "message thread not found") || strings.Contains(msg, "topic_closed") ||
		strings.Contains(msg, "topic_deleted") || strings.Contains(msg, "topic was deleted")
}

// toGeneral logs that a message for p's topic goes to the General topic
// instead (the topic was closed or deleted) and returns that place.
func (b *Bot) toGeneral(p place, what string, err error) place {
	b.log.Warn("telegram: the topic is closed or deleted; "+what+" goes to the General topic",
		slog.Int64("chat", p.chat), slog.Int("topic", p.thread), slog.String("error", b.redact(err)))
	return place{chat: p.chat}
}
