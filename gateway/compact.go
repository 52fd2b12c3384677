package gateway

import (
	"context"
	"errors"

	"github.com/chatgate/chatgate/sessions"
)

// Summing up now. {"type":"compact"} asks for a summary of the session's
// conversation at once — everything but its last exchange that no summary
// covers yet (sessions.Manager.Compact) — and is answered with
// {"type":"compacted","messages":N}, N the messages the summary took in
// (0: nothing to sum up), or an error frame unsupported when compaction
// is off for the channel, over_budget when the user is over their budget.

// errCompactionOff is the answer to compact with compaction off.
var errCompactionOff = &wsError{"unsupported", "compaction is off for this channel"}

// errOverBudget is the answer to compact from a user over their budget:
// a summary is a model call, and they may cause none until it frees up.
var errOverBudget = &wsError{"over_budget", "you have reached your usage limit; a summary can be made once it resets"}

type compactedFrame struct {
	Type     string `json:"type"`
	Messages int    `json:"messages"`
}

// compact runs a compact frame on the connection's worker: after the
// frames before it, before the ones after it.
func (c *wsConn) compact(ctx context.Context, in sessions.Inbound) {
	defer c.finish()
	n, err := c.ws.sess.Compact(ctx, in)
	switch {
	case errors.Is(err, sessions.ErrCompactionOff):
		c.sendError(errCompactionOff)
	case errors.Is(err, sessions.ErrOverBudget):
		c.sendError(errOverBudget)
	case err != nil:
		c.sendError(handleError(err))
	default:
		c.enqueue(encode(compactedFrame{Type: "compacted", Messages: n}))
	}
}
