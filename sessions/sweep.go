package sessions

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// Schedule is one cron job a Sweeper runs.
type Schedule struct {
	Name string // "idle", "daily:<channel>", "purge"
	// Spec is the robfig/cron spec of the job; for a daily sweep, whose
	// instants come from Every, it only describes them.
	Spec string
	// Every, when set, gives the job's instants instead of Spec.
	Every cron.Schedule
}

func (s Schedule) String() string { return s.Name + ": " + s.Spec }

// dailySchedule fires a daily sweep at each instant its policy's Boundary
// moves on. A cron spec "0 <hour> * * *" cannot: robfig/cron skips the day
// whose hour falls in a DST gap and fires twice on a day the hour repeats.
type dailySchedule struct{ p ResetPolicy }

// Next implements cron.Schedule.
func (d dailySchedule) Next(t time.Time) time.Time { return d.p.NextBoundary(t) }

// Schedules lists the sweeps the channels' policies need: an idle sweep
// every minute when any channel resets on idleness, a daily sweep per daily
// channel at its hour in its time zone, and an hourly purge when a retention
// period or a resume token TTL is set.
func (s *Sweeper) Schedules() []Schedule {
	var out []Schedule
	policies := s.host.settings().policies
	channels := make([]string, 0, len(policies))
	for ch := range policies {
		channels = append(channels, ch)
	}
	sort.Strings(channels)
	idle := false
	for _, ch := range channels {
		p := policies[ch].Reset
		idle = idle || p.idle()
		if p.daily() {
			out = append(out, Schedule{Name: "daily:" + ch, Spec: fmt.Sprintf("daily at %02d:00 %s", p.AtHour, p.location()),
				Every: dailySchedule{p}})
		}
	}
	if idle {
		out = append([]Schedule{{Name: "idle", Spec: "* * * * *"}}, out...)
	}
	if s.cfg.retentionDays > 0 || s.cfg.resumeTTL > 0 {
		out = append(out, Schedule{Name: "purge", Spec: "@hourly"})
	}
	return out
}

// RunSweep runs one scheduled sweep or purge of Schedules by its name,
// counted for the drain, and returns how many conversations it archived
// or purged. Shutdown ends it at its next chunk once the drain's deadline
// has passed; after Shutdown began it runs nothing (ErrShuttingDown).
func (s *Sweeper) RunSweep(name string) (int, error) {
	if !s.life.enterSweep() {
		return 0, ErrShuttingDown
	}
	defer s.life.leaveSweep()
	ctx, cancel := context.WithTimeout(s.life.base, 10*time.Minute)
	defer cancel()
	if name == "idle" {
		s.locks.Sweep()
	}
	var n int
	// With several replicas on one PostgreSQL database, one runs each sweep;
	// the sweeps are idempotent anyway, this only saves the work.
	_, err := s.store.Exclusive(ctx, "sweep:"+name, func() (err error) {
		switch {
		case name == "idle":
			n, err = s.SweepIdle(ctx)
		case name == "purge":
			var p int64
			p, err = s.retention(ctx)
			n = int(p)
		case strings.HasPrefix(name, "daily:"):
			n, err = s.SweepDaily(ctx, strings.TrimPrefix(name, "daily:"))
		}
		return err
	})
	switch {
	case err != nil && s.life.base.Err() != nil:
		// Sweeps are idempotent: the next run, after the restart, goes on.
		s.log.Warn("sweep stopped by the shutdown", slog.String("sweep", name), slog.Int("conversations", n))
		return n, err
	case err != nil:
		s.log.Error("sweep failed", slog.String("sweep", name), slog.Int("conversations", n), slog.String("error", err.Error()))
		return n, err
	}
	if n > 0 {
		s.log.Info("sweep archived conversations", slog.String("sweep", name), slog.Int("conversations", n))
	}
	return n, nil
}

// SweepIdle archives, in every idle-resetting channel, the conversations
// idle for the channel's idle period. It returns how many it archived.
func (s *Sweeper) SweepIdle(ctx context.Context) (int, error) {
	now := s.now()
	total := 0
	for ch, p := range s.host.settings().policies {
		if !p.Reset.idle() {
			continue
		}
		n, err := s.store.SweepIdle(ctx, ch, now.Add(-p.Reset.IdleFor), now, s.afterSweep(ledger.ReasonIdle))
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// SweepDaily archives the channel's conversations started before its latest
// daily boundary.
func (s *Sweeper) SweepDaily(ctx context.Context, channel string) (int, error) {
	p, ok := s.host.settings().policies[channel]
	if !ok || !p.Reset.daily() {
		return 0, nil
	}
	now := s.now()
	return s.store.SweepDaily(ctx, channel, p.Reset.Boundary(now), now, s.afterSweep(ledger.ReasonDaily))
}

// afterSweep drops each archived conversation's hot state and announces
// its reset, one committed chunk at a time.
func (s *Sweeper) afterSweep(reason string) func([]ledger.Archived) {
	return func(archived []ledger.Archived) {
		for _, c := range archived {
			s.hot.Remove(c.SessionKey)
			s.publish(ResetEvent{Channel: c.Channel, SessionKey: c.SessionKey, OldConversation: c.ID, Reason: reason, OldMessages: c.LastSeq})
		}
	}
}

// Purge deletes archived conversations older than the retention period.
func (s *Sweeper) Purge(ctx context.Context) (int64, error) {
	if s.cfg.retentionDays <= 0 {
		return 0, nil
	}
	return s.store.Purge(ctx, s.now().AddDate(0, 0, -s.cfg.retentionDays))
}
