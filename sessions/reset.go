package sessions

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// ResetMode selects when conversations reset on their own.
type ResetMode string

// Reset modes.
const (
	ResetNone  ResetMode = "none"
	ResetIdle  ResetMode = "idle"
	ResetDaily ResetMode = "daily"
	ResetBoth  ResetMode = "both"
)

// ResetPolicy decides from stored timestamps whether a conversation has
// expired.
type ResetPolicy struct {
	Mode     ResetMode
	IdleFor  time.Duration  // idle: expired when now − last activity ≥ IdleFor
	AtHour   int            // daily: expired when started before the latest AtHour boundary
	Location *time.Location // of AtHour; nil means UTC
}

func (p ResetPolicy) idle() bool  { return p.Mode == ResetIdle || p.Mode == ResetBoth }
func (p ResetPolicy) daily() bool { return p.Mode == ResetDaily || p.Mode == ResetBoth }

// Validate reports a policy that cannot be evaluated.
func (p ResetPolicy) Validate() error {
	switch p.Mode {
	case ResetNone, "":
	case ResetIdle, ResetDaily, ResetBoth:
	default:
		return fmt.Errorf("unknown reset mode %q", p.Mode)
	}
	if p.idle() && p.IdleFor < time.Minute {
		return fmt.Errorf("idle reset needs at least one minute, got %s", p.IdleFor)
	}
	if p.daily() && (p.AtHour < 0 || p.AtHour > 23) {
		return fmt.Errorf("daily reset hour %d is not 0–23", p.AtHour)
	}
	return nil
}

// Expired reports whether c has expired at now, and why. With mode both the
// reason is the condition that came true first.
func (p ResetPolicy) Expired(c *ledger.Conversation, now time.Time) (reason string, expired bool) {
	var idleAt, dailyAt time.Time
	if p.idle() {
		if t := c.LastActivityAt.Add(p.IdleFor); !now.Before(t) {
			idleAt = t
		}
	}
	if p.daily() {
		if b := p.Boundary(now); c.StartedAt.Before(b) {
			dailyAt = b
		}
	}
	switch {
	case idleAt.IsZero() && dailyAt.IsZero():
		return "", false
	case dailyAt.IsZero():
		return ledger.ReasonIdle, true
	case idleAt.IsZero():
		return ledger.ReasonDaily, true
	case idleAt.Before(dailyAt):
		return ledger.ReasonIdle, true
	default:
		return ledger.ReasonDaily, true
	}
}

// Boundary is the most recent daily reset instant at or before now.
//
// On a day when AtHour does not exist (a DST gap) the boundary is the first
// instant after the gap; on a day when it occurs twice (DST ends) it is the
// first occurrence. Either way there is exactly one boundary per local day.
func (p ResetPolicy) Boundary(now time.Time) time.Time {
	loc := p.location()
	local := now.In(loc)
	b := dayBoundary(local.Year(), local.Month(), local.Day(), p.AtHour, loc)
	if b.After(now) {
		// Step back from noon, safely away from any DST change.
		prev := time.Date(local.Year(), local.Month(), local.Day()-1, 12, 0, 0, 0, loc)
		b = dayBoundary(prev.Year(), prev.Month(), prev.Day(), p.AtHour, loc)
	}
	return b
}

// NextBoundary is the first daily reset instant after t: the instant at
// which Boundary moves on. The daily sweep is scheduled by it, so the sweep
// and the check on every message agree on each day's reset: at the end of
// a DST gap that swallowed AtHour, and once on a day AtHour repeats.
func (p ResetPolicy) NextBoundary(t time.Time) time.Time {
	loc := p.location()
	local := t.In(loc)
	// Today's boundary, else tomorrow's; days are stepped at noon, safely
	// away from any DST change.
	for d := 0; ; d++ {
		day := time.Date(local.Year(), local.Month(), local.Day()+d, 12, 0, 0, 0, loc)
		if b := dayBoundary(day.Year(), day.Month(), day.Day(), p.AtHour, loc); b.After(t) {
			return b
		}
	}
}

func (p ResetPolicy) location() *time.Location {
	if p.Location == nil {
		return time.UTC
	}
	return p.Location
}

// dayBoundary returns the first instant of hour:00 on the given local day.
func dayBoundary(y int, m time.Month, d, hour int, loc *time.Location) time.Time {
	t := time.Date(y, m, d, hour, 0, 0, 0, loc)
	if t.Hour() != hour {
		// The hour does not exist (DST gap): time.Date normalised it forward
		// or backward by the gap; the reset happens when the day reaches
		// the hour, which is the end of the gap.
		for probe := time.Date(y, m, d, 0, 0, 0, 0, loc); probe.Day() == d; probe = probe.Add(15 * time.Minute) {
			if probe.Hour() > hour {
				return probe
			}
		}
		return t
	}
	// The hour may exist twice (DST ends): take the earlier instant.
	for _, back := range []time.Duration{2 * time.Hour, time.Hour, 30 * time.Minute} {
		e := t.Add(-back)
		if el := e.In(loc); el.Year() == y && el.Month() == m && el.Day() == d && el.Hour() == hour && el.Minute() == 0 {
			return e
		}
	}
	return t
}

// Reset archives the session key's conversation (reason manual) and opens a
// new one, which it returns. It does not wait for a running turn: that
// turn, and the messages stored before the reset, are answered in the
// archived conversation; the messages after it go to the new one.
func (m *Manager) Reset(ctx context.Context, in Inbound) (ResetEvent, error) {
	if in.Channel == "" || in.SessionKey == "" {
		return ResetEvent{}, ErrBadInbound
	}
	release, err := m.acquire(ctx, in.SessionKey)
	if err != nil {
		return ResetEvent{}, err
	}
	defer release()
	now := m.now()
	ev := ResetEvent{Channel: in.Channel, SessionKey: in.SessionKey, Reason: ledger.ReasonManual}
	if conv, err := m.store.ActiveConversation(ctx, in.SessionKey); err != nil {
		return ResetEvent{}, err
	} else if conv != nil {
		if _, err := m.store.Archive(ctx, conv.ID, ledger.ReasonManual, now, -1); err != nil {
			return ResetEvent{}, err
		}
		ev.OldConversation, ev.OldMessages = conv.ID, conv.LastSeq
	}
	m.hot.Remove(in.SessionKey)
	hc, err := m.create(ctx, in, m.Policy(in.Channel), now)
	if err != nil {
		return ResetEvent{}, err
	}
	ev.NewConversation = hc.conv.ID
	m.log.Info("conversation reset", slog.String("session_key", in.SessionKey), slog.String("reason", ledger.ReasonManual),
		slog.String("archived", ev.OldConversation), slog.String("conversation", ev.NewConversation))
	m.relay.publish(ev)
	return ev, nil
}

// Stop cancels the running turn of a session key — or, when none runs,
// the turn its waiting messages would start next (debounce). The stopped
// turn's partial reply is stored as interrupted (stopped) and is not run
// again; nothing stored is dropped, and messages sent after the stop are
// answered as usual.
func (m *Manager) Stop(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.life.cancelTurn(key, errStoppedByUser) {
		return true
	}
	if b := m.bursts[key]; b != nil && len(b.waiting) > 0 {
		b.stop = true
		select {
		case b.kick <- struct{}{}:
		default:
		}
		return true
	}
	return false
}
