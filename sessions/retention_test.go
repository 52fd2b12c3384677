package sessions

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/store"
)

// The hourly purge deletes the resume bindings of expired tokens and of
// principals whose conversations are gone (a guest idle past the retention
// period), and keeps every live one and the rows of other channels.
func TestPurgeRemovesDeadChannelStates(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		ctx := context.Background()
		db := open()
		t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
		c := newClock(t0.AddDate(0, 0, -61))
		m := New(db, agent.Echo{}, Options{Now: c.Now, Logger: quiet, RetentionDays: 30, ResumeTTL: 60 * 24 * time.Hour})
		t.Cleanup(func() { m.Shutdown(context.Background()) })
		issue := func(principal string) string {
			t.Helper()
			tok, err := m.Conversations().NewResumeToken(ctx, "websocket", principal)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Conversations().Open(ctx, msg(WebSocketKey(principal), ""), -1, 10); err != nil {
				t.Fatal(err)
			}
			return tok
		}
		eve := issue("eve") // t0-61d: expired at t0
		c.Set(t0)
		guest := issue("guest-0123456789abcdef")
		bob := issue("bob")
		if p, err := m.Conversations().ResumePrincipal(ctx, "websocket", eve); !errors.Is(err, ErrResumeExpired) || p != "" {
			t.Fatalf("expired token resolved to %q, %v", p, err)
		}
		if err := m.Conversations().SetChannelState(ctx, "telegram:offset", "42"); err != nil {
			t.Fatal(err)
		}
		// A binding written before bindings carried their issue time.
		if err := db.SetState(ctx, resumeKey("websocket", "legacy-token"), "dave"); err != nil {
			t.Fatal(err)
		}
		c.Advance(31 * 24 * time.Hour)
		carol := issue("carol")
		if _, err := NewSweeper(m, nil).retention(ctx); err != nil {
			t.Fatal(err)
		}
		var names []string
		db.Gorm().Model(&ChannelState{}).Order("name").Pluck("name", &names)
		want := []string{resumeKey("websocket", bob), resumeKey("websocket", carol), resumeKey("websocket", "legacy-token"), "telegram:offset"}
		sort.Strings(want)
		if len(names) != len(want) {
			t.Fatalf("states after purge = %v, want %v", names, want)
		}
		for i := range want {
			if names[i] != want[i] {
				t.Fatalf("states after purge = %v, want %v", names, want)
			}
		}
		if got := conversations(t, db, WebSocketKey("guest-0123456789abcdef")); len(got) != 0 {
			t.Fatalf("the idle guest's conversation was kept: %+v", got)
		}
		if got := conversations(t, db, WebSocketKey("bob")); len(got) != 1 {
			t.Fatalf("bob's conversation: %+v", got)
		}
		for tok, who := range map[string]string{bob: "bob", carol: "carol", "legacy-token": "dave", guest: "", eve: ""} {
			if p, err := m.Conversations().ResumePrincipal(ctx, "websocket", tok); err != nil || p != who {
				t.Fatalf("token of %q resolves to %q, %v", who, p, err)
			}
		}
		// The legacy binding was stamped at the purge: it expires one TTL on.
		c.Advance(61 * 24 * time.Hour)
		if _, err := m.Conversations().ResumePrincipal(ctx, "websocket", "legacy-token"); !errors.Is(err, ErrResumeExpired) {
			t.Fatalf("legacy token after a TTL: %v", err)
		}
	})
}
