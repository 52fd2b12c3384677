package gateway

import "maps"

// wsLive is the part of WSOptions a configuration reload changes. It is
// swapped whole: a connection already past hello keeps its principal, and
// the next upgrade, hello and message read the new values.
type wsLive struct {
	tokens       map[string]string
	anonymous    bool
	perSecond    float64 // each connection's bucket before hello
	burst        int
	historyLimit int
}

func liveOf(opts WSOptions) *wsLive {
	return &wsLive{tokens: maps.Clone(opts.AuthTokens), anonymous: opts.Anonymous,
		perSecond: opts.RatePerSecond, burst: opts.RateBurst, historyLimit: opts.HistoryLimit}
}

// WSSettings is what Reconfigure changes in a running WebSocket channel.
type WSSettings struct {
	AuthTokens          map[string]string
	Anonymous           bool
	RatePerSecond       float64
	RateBurst           int
	RateGlobalPerSecond float64
	RateGlobalBurst     int
	HistoryLimit        int
}

// Settings are the settings in force: what the last Reconfigure gave, or
// the options of NewWebSocket, with their defaults.
func (ws *WebSocket) Settings() WSSettings {
	cur := ws.cur.Load()
	s := WSSettings{AuthTokens: maps.Clone(cur.tokens), Anonymous: cur.anonymous, HistoryLimit: cur.historyLimit}
	s.RatePerSecond, s.RateBurst, s.RateGlobalPerSecond, s.RateGlobalBurst = ws.limits.Rates()
	return s
}

// Reconfigure applies new auth tokens, rate limits and history limit
// without closing a connection. Connections that already said hello keep
// their principal (a removed token ends no session); new connections and
// hellos need a token of the new set. The principals' buckets take the new
// rate at once (ratelimit.Limiter.Set).
func (ws *WebSocket) Reconfigure(s WSSettings) {
	opts := WSOptions{AuthTokens: s.AuthTokens, Anonymous: s.Anonymous,
		RatePerSecond: s.RatePerSecond, RateBurst: s.RateBurst, HistoryLimit: s.HistoryLimit}
	// The defaults of NewWebSocket.
	if opts.RatePerSecond <= 0 {
		opts.RatePerSecond = 5
	}
	if opts.RateBurst <= 0 {
		opts.RateBurst = 10
	}
	if opts.HistoryLimit <= 0 {
		opts.HistoryLimit = 100
	}
	ws.cur.Store(liveOf(opts))
	ws.limits.Set(opts.RatePerSecond, opts.RateBurst, s.RateGlobalPerSecond, s.RateGlobalBurst)
}
