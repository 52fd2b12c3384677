package gateway

import (
	"context"

	"github.com/chatgate/chatgate/sessions"
)

// quoted is the text of message seq of in's active conversation — a user
// message or one of the bot's replies, as the client's transcript shows
// them — which a message frame's reply_to names. A seq that is no such
// message is refused with not_found; the message is not stored.
func (ws *WebSocket) quoted(ctx context.Context, in sessions.Inbound, seq int64) (string, *wsError) {
	t, err := ws.sess.Open(ctx, in, seq-1, 1)
	if err != nil {
		return "", handleError(err)
	}
	for _, e := range t.Entries {
		if e.Seq == seq {
			return e.Text, nil
		}
	}
	return "", errNotFound.with("reply_to: no message %d in this conversation", seq)
}
