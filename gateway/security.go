package gateway

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/chatgate/chatgate/internal/ratelimit"
	"github.com/chatgate/chatgate/sessions"
)

// Who may use the WebSocket channel, and how fast: the upgrade's Origin
// check, auth tokens (header, query or hello), expired resume tokens, and
// the rate limits on frames.

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

// DevMode reports whether clients come without auth tokens: they name
// themselves in hello, unless the channel is anonymous.
func (ws *WebSocket) DevMode() bool { return len(ws.cur.Load().tokens) == 0 }

func (ws *WebSocket) checkOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true // not a browser
	}
	u, err := url.Parse(origin)
	if err != nil {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	for _, allowed := range ws.opts.AllowedOrigins {
		if allowed == "*" || strings.EqualFold(strings.TrimRight(allowed, "/"), origin) {
			return true
		}
	}
	return false
}

// principalFor returns the name whose token this is, comparing every token
// in constant time.
func (ws *WebSocket) principalFor(token string) string {
	found := ""
	for name, t := range ws.cur.Load().tokens {
		if subtle.ConstantTimeCompare([]byte(token), []byte(t)) == 1 {
			found = name
		}
	}
	return found
}

func requestToken(r *http.Request) string {
	if tok, ok := bearer(r); ok {
		return tok
	}
	return r.URL.Query().Get("token")
}

// bearer is the token of an "Authorization: Bearer TOKEN" header.
func bearer(r *http.Request) (string, bool) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return strings.TrimSpace(tok), ok
}
