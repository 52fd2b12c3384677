package sessions

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/robfig/cron/v3"
)

// SweepJobs is what a Sweeper runs: the jobs the channels' policies need
// now, and one run of a job by its name. The session manager implements
// it: a sweep archives conversations under their keys' locks, and is
// counted for its drain.
type SweepJobs interface {
	Schedules() []Schedule
	RunSweep(name string) (int, error)
}

// Sweeper runs the reset sweeps and the retention purge at their times,
// on robfig/cron in UTC (a daily sweep's instants come from its policy,
// DST handled); a run still going when its next is due skips that one.
// The sweeps are set-based and idempotent, so a run that is late,
// repeated, or concurrent with another replica's archives nothing twice,
// and the check on every message keeps resets exact even when a run is
// missed. It is built and started in the gateway's wiring, rescheduled by
// a reload, and stopped before the session manager's drain.
type Sweeper struct {
	jobs SweepJobs
	log  *slog.Logger

	mu   sync.Mutex // guards cron and ids against a reload's Reschedule
	cron *cron.Cron
	ids  map[string]cron.EntryID
}

// NewSweeper returns the Sweeper of jobs, not yet started.
func NewSweeper(jobs SweepJobs, log *slog.Logger) *Sweeper {
	if log == nil {
		log = slog.Default()
	}
	return &Sweeper{jobs: jobs, log: log}
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
	for _, sc := range s.jobs.Schedules() {
		name := sc.Name
		job := cron.FuncJob(func() { s.jobs.RunSweep(name) })
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
