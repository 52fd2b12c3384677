package main

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/gateway"
	"github.com/chatgate/chatgate/sessions"
)

// burstResult is the collect row: clients each sending bursts of a few
// messages back to back and waiting for the one reply that covers them.
type burstResult struct {
	Clients    int     `json:"clients"`
	Burst      int     `json:"burst"`
	DebounceMs float64 `json:"debounce_ms"`
	Bursts     int     `json:"bursts"`
	// PerSecond counts bursts answered; MessagesPerSecond their messages.
	PerSecond         float64 `json:"bursts_per_second"`
	MessagesPerSecond float64 `json:"messages_per_second"`
	// CallsPerBurst is agent calls ÷ bursts: 1 when every burst merged.
	CallsPerBurst float64 `json:"agent_calls_per_burst"`
	// From a burst's first message sent to the reply covering its last.
	P50Millis  float64 `json:"p50_ms"`
	P99Millis  float64 `json:"p99_ms"`
	ErrorCount int     `json:"errors"`
}

// countingEcho is the echo agent, counting its calls.
type countingEcho struct {
	agent.Echo
	calls atomic.Int64
}

func (c *countingEcho) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	c.calls.Add(1)
	return c.Echo.Reply(ctx, req, onDelta)
}

// collectBursts serves a gateway on driver in busy mode collect and
// drives it with bursts.
func collectBursts(ctx context.Context, driver string, clients, burst int, debounce time.Duration, o options) (burstResult, error) {
	db, closeDB, err := openStore(ctx, driver, o)
	if err != nil {
		return burstResult{}, err
	}
	ag := &countingEcho{}
	mgr := sessions.New(db, ag, sessions.Options{Logger: discard, HotConversations: 4096,
		Policies: map[string]sessions.Policy{gateway.Channel: {MaxHistory: 20, Busy: sessions.BusyPolicy{Mode: sessions.BusyCollect, Debounce: debounce}}}})
	ws := gateway.NewWebSocket(mgr, gateway.WSOptions{RatePerSecond: 1e6, RateBurst: 1 << 20, HistoryLimit: 20, Logger: discard})
	srv := gateway.New(discard)
	srv.Handle("GET /ws", ws)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		closeDB()
		return burstResult{}, err
	}
	go srv.Serve(ln)
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(c)
		mgr.Shutdown(c)
		ws.Shutdown(c)
		closeDB()
	}()
	r := driveBursts(ctx, "ws://"+ln.Addr().String()+"/ws", clients, burst, o)
	r.DebounceMs = float64(debounce.Milliseconds())
	if r.Bursts > 0 {
		r.CallsPerBurst = float64(ag.calls.Load()) / float64(r.Bursts)
	}
	return r, nil
}

// driveBursts runs n clients, each sending burst messages at once and
// then reading until the reply to the last of them (replies to earlier
// ones, if the gateway answered them apart, are read past), bounded by
// o.messages bursts and o.duration.
func driveBursts(ctx context.Context, url string, n, burst int, o options) burstResult {
	ctx, cancel := context.WithTimeout(ctx, o.duration+10*time.Second)
	defer cancel()
	deadline := time.Now().Add(o.duration)
	var mu sync.Mutex
	var lat []time.Duration
	errors := 0
	fail := func() {
		mu.Lock()
		errors++
		mu.Unlock()
	}
	var wg sync.WaitGroup
	dialer := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	start := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, _, err := dialer.DialContext(ctx, url, nil)
			if err != nil {
				fail()
				return
			}
			defer c.Close()
			c.WriteJSON(map[string]any{"type": "hello", "user": fmt.Sprintf("burst-%d-%s", i, shortID())})
			var ready map[string]any
			if c.ReadJSON(&ready) != nil {
				fail()
				return
			}
			var mine []time.Duration
			for b := 0; b < o.messages/burst+1 && time.Now().Before(deadline); b++ {
				t0 := time.Now()
				last := ""
				for k := 0; k < burst; k++ {
					last = fmt.Sprintf("b%d-%d", b, k)
					if c.WriteJSON(map[string]any{"type": "message", "id": last, "text": "part " + last}) != nil {
						fail()
						return
					}
				}
				for {
					c.SetReadDeadline(time.Now().Add(30 * time.Second))
					var f map[string]any
					if c.ReadJSON(&f) != nil || f["type"] == "error" {
						fail()
						return
					}
					if f["type"] == "reply" && f["reply_to"] == last {
						break
					}
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	l := summarize(n, lat, time.Since(start), errors)
	return burstResult{Clients: n, Burst: burst, Bursts: l.Turns, PerSecond: l.PerSecond, MessagesPerSecond: l.PerSecond * float64(burst),
		P50Millis: l.P50Millis, P99Millis: l.P99Millis, ErrorCount: l.ErrorCount}
}
