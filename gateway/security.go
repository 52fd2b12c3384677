package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/chatgate/chatgate/internal/ratelimit"
	"github.com/chatgate/chatgate/sessions"
)

// Which limit refused a WebSocket frame, as the rate limit metric labels it.
const (
	LimitConnection = "connection" // before hello: the connection's own bucket
	LimitPrincipal  = "principal"  // the principal's bucket, shared by its connections
)

func newLimits(opts WSOptions) *ratelimit.Limiter {
	return ratelimit.New(ratelimit.Options{
		PerSecond: opts.RatePerSecond, Burst: opts.RateBurst,
		GlobalPerSecond: opts.RateGlobalPerSecond, GlobalBurst: opts.RateGlobalBurst,
		KeyLimit: LimitPrincipal, Now: opts.Now,
	})
}

// anonymous reports whether clients get generated guest principals only.
func (ws *WebSocket) anonymous() bool {
	cur := ws.cur.Load()
	return len(cur.tokens) == 0 && cur.anonymous
}

func (ws *WebSocket) refused(limit string) {
	if ws.opts.RateLimited != nil {
		ws.opts.RateLimited(limit)
	}
}

// allow takes a token for one frame. Until hello the connection's own
// bucket counts (the principal may not be known yet); after it the
// principal's, which all its connections share, and the channel's
// ceiling. Opening more connections thus buys no more messages.
func (c *wsConn) allow() bool {
	if !c.hello {
		if c.limiter.AllowN(c.ws.opts.Now(), 1) {
			return true
		}
		c.ws.refused(LimitConnection)
		return false
	}
	if limit := c.ws.limits.Allow(c.principal); limit != "" {
		c.ws.refused(limit)
		return false
	}
	return true
}

// resumeExpired answers a hello whose resume token has expired with
// not_found, and reports whether it did. Nothing is opened or issued from
// such a token: the client sends hello again without it (and so gets a new
// principal unless it has an auth token or names itself in development
// mode).
func (c *wsConn) resumeExpired(f *clientFrame) bool {
	if f.Session == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.ws.sess.ResumePrincipal(ctx, Channel, f.Session)
	if !errors.Is(err, sessions.ErrResumeExpired) {
		return false
	}
	c.sendError(errNotFound.with("the session token has expired; send hello again without it to start a new session"))
	return true
}
