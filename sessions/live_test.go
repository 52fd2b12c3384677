package sessions

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chatgate/chatgate/sessions/store"
)

// TestReconfigureAppliesToTheNextTurn swaps agent, instructions and
// policy while a turn runs: that turn finishes with what it started with,
// the next one uses the new settings, and the sweeps follow the policies.
func TestReconfigureAppliesToTheNextTurn(t *testing.T) {
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/gateway.db")
	c := newClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	old := &recorder{block: make(chan struct{}), started: make(chan struct{}, 1)}
	m := New(db, old, Options{Policies: map[string]Policy{"websocket": {MaxHistory: 10, Reset: ResetPolicy{Mode: ResetNone}}},
		Instructions: "old instructions", Now: c.Now, Logger: quiet})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.Shutdown(ctx)
	})
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	sw := NewSweeper(m, quiet)
	if err := sw.Start(); err != nil {
		t.Fatal(err)
	}
	defer sw.Stop()
	done := make(chan Outcome, 1)
	go func() { done <- handle(t, m, msg("websocket:ann", "first")) }()
	<-old.started

	next := &recorder{}
	m.Reconfigure(Settings{
		Policies:     map[string]Policy{"websocket": {MaxHistory: 3, Reset: ResetPolicy{Mode: ResetIdle, IdleFor: time.Hour}}},
		Instructions: "new instructions",
		Agent:        next,
	})
	if err := sw.Reschedule(); err != nil {
		t.Fatal(err)
	}
	close(old.block)
	<-done
	if got := old.last().Instructions; got != "old instructions" {
		t.Fatalf("running turn's instructions = %q, want the old ones", got)
	}
	if next.calls.Load() != 0 {
		t.Fatal("the running turn moved to the new agent")
	}

	handle(t, m, msg("websocket:ann", "second"))
	if next.calls.Load() != 1 || next.last().Instructions != "new instructions" {
		t.Fatalf("next turn: new agent calls %d, request %+v", next.calls.Load(), next.last())
	}
	if p := m.Policy("websocket"); p.MaxHistory != 3 || p.Reset.Mode != ResetIdle {
		t.Fatalf("policy after reconfigure = %+v", p)
	}
	if got := fmt.Sprint(sw.Schedules()); got != "[idle: * * * * *]" {
		t.Fatalf("schedules after reconfigure = %s", got)
	}
	if entries := len(sw.entries()); entries != 1 {
		t.Fatalf("cron entries after reconfigure = %d, want the idle sweep", entries)
	}
}
