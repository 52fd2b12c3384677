package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/chatgate/chatgate/agent"
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
	url, stop, err := serveGateway(db, closeDB, false, ag,
		sessions.Policy{MaxHistory: 20, Busy: sessions.BusyPolicy{Mode: sessions.BusyCollect, Debounce: debounce}})
	if err != nil {
		return burstResult{}, err
	}
	defer stop()
	l := drive(ctx, url, clients, o, true, burst)
	r := burstResult{Clients: clients, Burst: burst, DebounceMs: float64(debounce.Milliseconds()), Bursts: l.Turns,
		PerSecond: l.PerSecond, MessagesPerSecond: l.PerSecond * float64(burst), P50Millis: l.P50Millis, P99Millis: l.P99Millis, ErrorCount: l.ErrorCount}
	if r.Bursts > 0 {
		r.CallsPerBurst = float64(ag.calls.Load()) / float64(r.Bursts)
	}
	return r, nil
}
