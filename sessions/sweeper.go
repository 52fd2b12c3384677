package sessions

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/chatgate/chatgate/locks"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// Sweeper runs the reset sweeps and the retention purge, at their times
// (Schedules), on robfig/cron in UTC (a daily sweep's instants come from
// its policy, DST handled); a run still going when its next is due skips
// that one. Each run (RunSweep) is counted for the session manager's
// drain. The sweeps are set-based and idempotent, so a run that is late,
// repeated, or concurrent with another replica's archives nothing twice,
// and the check on every message keeps resets exact even when a run is
// missed. It is built and started in the gateway's wiring, rescheduled by
// a reload, and stopped before the session manager's drain.
type Sweeper struct {
	store   sweepStore
	host    sweepHost        // the turn path: the Manager
	publish func(ResetEvent) // tells a reset to its channel's route and the other replicas (relay.publish)
	life    *lifecycle
	locks   *locks.Cache // the session keys' state locks, swept of idle entries
	hot     *hotCache
	choices *Standing // the cached choices of model, forgotten when purged
	now     func() time.Time
	log     *slog.Logger
	cfg     sweepConfig

	mu   sync.Mutex // guards cron and ids against a reload's Reschedule
	cron *cron.Cron
	ids  map[string]cron.EntryID
}

// sweepConfig configures a Sweeper; NewSweeper fills it from the
// manager's Options.
type sweepConfig struct {
	retentionDays int           // Options.RetentionDays: archived conversations and idle guests older than this are purged (0 keeps)
	resumeTTL     time.Duration // Options.ResumeTTL: older resume tokens are purged (0: no expiry)
}

// sweepHost is what sweeps and purges need of the turn path (the
// Manager): the policies in force, and a session key's state lock (a
// guest's conversation is deleted under it, as a reset is made).
type sweepHost interface {
	settings() *liveSettings
	lockState(ctx context.Context, key string, drainEnds bool) (func(), error)
}

// sweepStore is what sweeps and purges do in the database.
type sweepStore interface {
	Exclusive(ctx context.Context, name string, fn func() error) (bool, error)
	SweepIdle(ctx context.Context, channel string, cutoff, at time.Time, each func([]ledger.Archived)) (int, error)
	SweepDaily(ctx context.Context, channel string, boundary, at time.Time, each func([]ledger.Archived)) (int, error)
	Purge(ctx context.Context, archivedBefore time.Time) (int64, error)
	IdleActive(ctx context.Context, channel, keyPrefix string, cutoff time.Time, limit int) ([]ledger.Conversation, error)
	DeleteIdle(ctx context.Context, convID string, cutoff time.Time) (bool, error)
	StateRows(ctx context.Context, prefix, after string, limit int) ([]ledger.ChannelState, error)
	SetState(ctx context.Context, key, value string) error
	KeysWithConversations(ctx context.Context, keys []string) (map[string]bool, error)
	DeleteStates(ctx context.Context, names []string) (int64, error)
	PurgeModelChoices(ctx context.Context, cutoff time.Time) (int64, error)
	PurgeFires(ctx context.Context, endedBefore time.Time) (int64, error)
}

// NewSweeper returns the Sweeper of m's conversations, configured by m's
// Options (RetentionDays, ResumeTTL), not yet started; log defaults to
// the manager's logger.
func NewSweeper(m *Manager, log *slog.Logger) *Sweeper {
	if log == nil {
		log = m.log
	}
	return &Sweeper{store: m.store, host: m, publish: m.relay.publish, life: m.life, locks: m.locks, hot: m.hot, choices: m.standing, now: m.now, log: log,
		cfg: sweepConfig{retentionDays: m.opts.RetentionDays, resumeTTL: m.opts.ResumeTTL}}
}

// Start schedules the jobs and starts running them at their times.
func (s *Sweeper) Start() error {
	c := cron.New(cron.WithLocation(time.UTC), cron.WithChain(cron.SkipIfStillRunning(cron.DiscardLogger)))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids = map[string]cron.EntryID{}
	if err := s.add(c); err != nil {
		return err
	}
	s.cron = c
	c.Start()
	return nil
}

// Reschedule replaces the scheduled jobs with those the current policies
// need (after a reload). Before Start, and after Stop, there is nothing
// to replace.
func (s *Sweeper) Reschedule() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cron == nil {
		return nil
	}
	for name, id := range s.ids {
		s.cron.Remove(id)
		delete(s.ids, name)
	}
	return s.add(s.cron)
}

// Stop starts no more runs; a run under way ends with the session
// manager's drain, which counts it.
func (s *Sweeper) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cron != nil {
		s.cron.Stop()
		s.cron = nil
	}
}

// add adds the jobs to c; mu is held or c not yet shared.
func (s *Sweeper) add(c *cron.Cron) error {
	for _, sc := range s.Schedules() {
		name := sc.Name
		job := cron.FuncJob(func() { s.RunSweep(name) })
		if sc.Every != nil {
			s.ids[name] = c.Schedule(sc.Every, job)
			continue
		}
		id, err := c.AddJob(sc.Spec, job)
		if err != nil {
			return fmt.Errorf("schedule %s sweep %q: %w", name, sc.Spec, err)
		}
		s.ids[name] = id
	}
	return nil
}

// entries are the scheduled jobs' instants, by name.
func (s *Sweeper) entries() map[string]cron.Schedule {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]cron.Schedule{}
	if s.cron == nil {
		return out
	}
	for name, id := range s.ids {
		out[name] = s.cron.Entry(id).Schedule
	}
	return out
}
