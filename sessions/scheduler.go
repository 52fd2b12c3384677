package sessions

// The Scheduler: the service that makes the bot act on its own time. It
// runs the operator's schedules (bot.yaml) and the users' reminders as
// turns of their conversations, each fire once, on any number of
// replicas sharing the database:
//
//   - A fire is a row (schedule key, due time) in the ledger. The next
//     fire of each operator schedule is planned as a row due ahead of its
//     time; a reminder's next time is its own row's next_due_at. Whoever
//     claims the row by one conditional statement (ledger's ClaimFire)
//     runs the fire, and nobody else.
//   - The fire's message is stored through Submit with a client id that
//     names the fire (ledger.FireMsgID): a fire claimed again after a
//     crash finds its message instead of storing a second one. From then
//     on it is a turn like any other — in its key's line after the user's
//     own messages, claimed, answered, delivered and marked by the turn
//     ledger, rescued by the rescuer — and the fire records that its turn
//     is stored (StoreFireTurn).
//   - The fire settles from its turn (settleStored): sent (with the
//     channel's reference), quiet (nothing to report: stored, not sent),
//     or failed. Fires missed while no gateway ran follow the misfire
//     rule (skipped_late, or one late fire); a fire over a budget is
//     skipped_budget before any model call.
//
// Time is the manager's clock (Options.Now, Options.After): tests drive a
// fake one and call Pass.

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// OperatorSchedule is one operator schedule as the Scheduler runs it.
type OperatorSchedule struct {
	Name    string
	When    schedules.When
	Target  ScheduleTarget
	Prompt  string
	Misfire schedules.Misfire
	// Quiet: a reply that is schedules.QuietReply is stored and not
	// sent; the fire's message tells the model so.
	Quiet bool
	// TokensPerDay is the schedule's own budget over all its fires, on
	// the day as the target channel's budgets count it; 0: none.
	TokensPerDay int64
}

// ScheduleTarget is whose conversation a schedule's turns are.
type ScheduleTarget struct {
	Channel string
	// SessionKey, UserID and ChatID address one conversation (ChatID as
	// the channel delivers to it: Telegram's "chat" or "chat/thread").
	SessionKey string
	UserID     string
	ChatID     string
	// AllSessions: every session of Channel that opted in to the
	// schedule by name (ledger.ScheduleOptIn), each a fire of its own.
	AllSessions bool
}

// SchedulerOptions tune the Scheduler; zero values take the defaults.
type SchedulerOptions struct {
	// Every is how often due fires are looked for (default 1s).
	Every time.Duration
	// Lease is how long a claimed fire is its claimer's before its turn
	// is stored; then any replica may claim it again (default 1m).
	Lease time.Duration
	// Batch is how many fires one look takes at most (default 256).
	Batch int
	// Workers is how many fires are claimed and stored at once (default 64).
	Workers int
	// ReminderMaxLate is how late a reminder missed while no gateway ran
	// still fires (default 6h): late is better than never for something
	// a user asked to be reminded of, and the reply says it is late.
	ReminderMaxLate time.Duration
}

func (o SchedulerOptions) withDefaults() SchedulerOptions {
	if o.Every <= 0 {
		o.Every = time.Second
	}
	if o.Lease <= 0 {
		o.Lease = time.Minute
	}
	if o.Batch <= 0 {
		o.Batch = 256
	}
	if o.Workers <= 0 {
		o.Workers = 64
	}
	if o.ReminderMaxLate <= 0 {
		o.ReminderMaxLate = 6 * time.Hour
	}
	return o
}

// fireHost is what the Scheduler needs of the turn path: the message of
// a fire stored and its outcome, delivered through the channel's route.
type fireHost interface {
	Submit(ctx context.Context, in Inbound, h Hooks) (*Ticket, error)
	Policy(channel string) Policy
}

// Scheduler runs schedules and reminders (see the top of this file).
type Scheduler struct {
	store    Store
	host     fireHost
	routes   *Routes
	standing *Standing
	obs      Observer
	tr       *tracing
	now      func() time.Time
	after    func(time.Duration) <-chan time.Time
	replica  string
	log      *slog.Logger
	opts     SchedulerOptions

	schedules atomic.Pointer[map[string]OperatorSchedule]
	// planned: the operator schedules' keys whose next fire is planned,
	// with the due time planned; a reload or a restart plans again.
	mu      sync.Mutex
	planned map[string]time.Time

	// backlog: the last pass took a full batch of fires or reminders and
	// ran some of them (took counts those); the next one starts at once
	// instead of after Every. A full batch of fires left for a channel
	// that does not deliver yet is no backlog: the loop does not spin.
	backlog atomic.Bool
	took    atomic.Int64
	// The schedules with a budget of their own: their fires running
	// here, and the most one fire has spent, by subject (admit).
	spendMu  sync.Mutex
	inflight map[string]int
	perFire  map[string]int64

	// waits are the fires' turns being waited for, to deliver and settle.
	waits sync.WaitGroup
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
	// started: Start ran, and done closes when its loop ends.
	started atomic.Bool
	// base ends with Stop: the fires' waits end with it.
	base   context.Context
	cancel context.CancelFunc
}

// NewScheduler builds the scheduler over m's store and turn path.
func NewScheduler(m *Manager, opts SchedulerOptions, log *slog.Logger) *Scheduler {
	if log == nil {
		log = m.log
	}
	s := &Scheduler{store: m.store, host: m, routes: m.routes, standing: m.standing, obs: m.opts.Observer, tr: m.tr,
		now: m.now, after: m.opts.After, replica: m.opts.ReplicaID, log: log, opts: opts.withDefaults(),
		planned: map[string]time.Time{}, inflight: map[string]int{}, perFire: map[string]int64{},
		stop: make(chan struct{}), done: make(chan struct{})}
	s.base, s.cancel = context.WithCancel(context.Background())
	s.schedules.Store(&map[string]OperatorSchedule{})
	return s
}

// SetSchedules replaces the operator schedules (bot.yaml's, at start and
// on reload). A schedule removed keeps its fires' rows; a fire of it
// still due is settled failed when found. Their next fires are planned
// on the next pass.
func (s *Scheduler) SetSchedules(list []OperatorSchedule) {
	next := make(map[string]OperatorSchedule, len(list))
	for _, sc := range list {
		next[sc.Name] = sc
	}
	s.schedules.Store(&next)
	s.mu.Lock()
	clear(s.planned)
	s.mu.Unlock()
}

// Schedules are the operator schedules run.
func (s *Scheduler) Schedules() map[string]OperatorSchedule { return *s.schedules.Load() }

// Start runs passes every Options.Every until Stop.
func (s *Scheduler) Start() {
	s.started.Store(true)
	go func() {
		defer close(s.done)
		for {
			if err := s.Pass(s.base); err != nil && s.base.Err() == nil {
				s.log.Warn("a pass of the scheduler failed; the next one tries again", slog.String("error", err.Error()))
			}
			if s.backlog.Load() {
				// More is due than one pass takes: thousands of fires
				// in one minute run at the store's pace, not at Batch
				// an Every.
				select {
				case <-s.stop:
					return
				default:
					continue
				}
			}
			select {
			case <-s.stop:
				return
			case <-s.after(s.untilNext()):
			}
		}
	}()
}

// untilNext is how long the next pass waits: Every, or less when an
// operator schedule's planned fire comes due sooner — found at its time,
// not up to Every after it.
func (s *Scheduler) untilNext() time.Duration {
	now := s.now()
	wait := s.opts.Every
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, due := range s.planned {
		if d := due.Sub(now); d > 0 && d < wait {
			wait = d
		}
	}
	return wait
}

// Stop ends the passes and waits for the fires being delivered and
// settled here, until ctx ends; what is left is the turn ledger's and
// the next pass's (here or on another replica).
func (s *Scheduler) Stop(ctx context.Context) {
	s.once.Do(func() { close(s.stop) })
	if s.started.Load() {
		select {
		case <-s.done:
		case <-ctx.Done():
		}
	}
	waited := make(chan struct{})
	go func() { s.waits.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-ctx.Done():
	}
	s.cancel()
}

// Pass is one look at the ledger: plan the operator schedules' next
// fires, run the fires and reminders due, and settle the fires whose
// turns ended.
func (s *Scheduler) Pass(ctx context.Context) error {
	now := s.now()
	s.backlog.Store(false)
	s.took.Store(0)
	err := errors.Join(s.plan(ctx, now), s.runDue(ctx, now), s.runReminders(ctx, now), s.settleEnded(ctx))
	if s.took.Load() == 0 {
		s.backlog.Store(false)
	}
	return err
}

// Wait waits until every fire this scheduler stored has been delivered
// and settled, as far as it can here (a test's "the work is done").
func (s *Scheduler) Wait() { s.waits.Wait() }

// plan makes sure each operator schedule (each single-target one, and
// each all_sessions one's fan-out) has its next fire planned. A key
// seen for the first time plans its first fire from a minute ago, so that
// a schedule added or a gateway started right after a due time still
// fires it; a key whose latest fire is in the past catches up by its
// misfire rule (catchUp).
func (s *Scheduler) plan(ctx context.Context, now time.Time) error {
	var errs []error
	for name, sc := range s.Schedules() {
		key := schedules.OperatorKey(name)
		s.mu.Lock()
		next, ok := s.planned[key]
		s.mu.Unlock()
		if ok && next.After(now) {
			continue
		}
		latest, found, err := s.store.LatestFire(ctx, key)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		from := now.Add(-schedules.OnTime)
		if found && latest.After(now) && sc.When.Next(latest.Add(-time.Nanosecond)).Equal(latest) {
			s.mu.Lock()
			s.planned[key] = latest
			s.mu.Unlock()
			continue
		}
		if found && latest.After(now) {
			// Planned at a time the schedule no longer has (a reload
			// changed it): that fire is dropped when it comes due, and the
			// schedule's next time is planned now.
			found = false
		}
		if found {
			from = latest
			if latest.Before(now.Add(-schedules.OnTime)) {
				if !s.delivers(sc.Target.Channel) {
					continue // caught up once the channel delivers (delivers)
				}
				// Nothing planned since the latest fire: no gateway ran
				// at the times between.
				if err := s.catchUp(ctx, sc, key, "", latest, now); err != nil {
					errs = append(errs, err)
					continue
				}
				from = now
			}
		}
		due := sc.When.Next(from)
		if due.IsZero() {
			continue
		}
		if _, err := s.store.PlanFires(ctx, []ledger.ScheduleFire{{ScheduleKey: key, DueAt: due, SessionKey: sc.Target.SessionKey, CreatedAt: now}}); err != nil {
			errs = append(errs, err)
			continue
		}
		s.mu.Lock()
		s.planned[key] = due
		s.mu.Unlock()
	}
	return errors.Join(errs...)
}

// catchUp applies sc's misfire rule to its due times after after, up to
// now, none of which has a fire: the one it runs late is claimed and run,
// the others recorded skipped_late.
func (s *Scheduler) catchUp(ctx context.Context, sc OperatorSchedule, key, sessionKey string, after, now time.Time) error {
	d := sc.Misfire.Catchup(sc.When, after, now, keptSkips)
	return s.decided(ctx, key, sessionKey, d, now, func(due time.Time) { s.runOperator(ctx, sc, key, sessionKey, due, now) })
}

// decided records a misfire decision: the skipped fires skipped_late,
// then run for the one to run.
//
// Of a long outage only the latest keptSkips missed fires are recorded:
// a minutely schedule down for a month is not 43,000 rows; the others are
// counted in the log.
func (s *Scheduler) decided(ctx context.Context, key, sessionKey string, d schedules.Decision, now time.Time, run func(due time.Time)) error {
	if d.Omitted > 0 {
		s.log.Warn("missed fires not recorded one by one", slog.String("fire", key), slog.Int("omitted", d.Omitted))
	}
	if len(d.Skipped) > 0 {
		n, err := s.store.SkipFires(ctx, key, sessionKey, d.Skipped, SkippedLateReason, now)
		if err != nil {
			return err
		}
		for range n {
			s.obs.FireEnded(fireKind(key), ledger.FireSkippedLate)
		}
	}
	if d.Run != nil {
		run(d.Run.Due)
	}
	return nil
}

// dropGrace is how long a fire of a schedule this replica does not know
// (or knows with other times or another target) is left for a replica
// that does — during a rolling deploy or a reload of one replica — before
// it is dropped.
const dropGrace = 5 * time.Minute

// dropLater drops a fire whose schedule this replica does not have as it
// was planned, once dropGrace has passed since its due time.
func (s *Scheduler) dropLater(ctx context.Context, f ledger.ScheduleFire, now time.Time, reason string) {
	if now.Sub(f.DueAt) < dropGrace {
		return
	}
	s.drop(ctx, f, now, reason)
}

// drop settles a fire that is not to run, with the reason.
func (s *Scheduler) drop(ctx context.Context, f ledger.ScheduleFire, now time.Time, reason string) {
	s.settleUnrun(ctx, f, now, ledger.FireDropped, reason)
}

// withFirst makes sure a catch-up from a fire's own row settles that
// row: when keptSkips left it out, it is skipped with the others (unless
// it is the one to run).
func withFirst(d schedules.Decision, due time.Time) schedules.Decision {
	if d.Omitted > 0 && (d.Run == nil || !d.Run.Due.Equal(due)) {
		d.Skipped = append([]time.Time{due}, d.Skipped...)
		d.Omitted--
	}
	return d
}

// keptSkips is how many missed fires of one key a catch-up records
// skipped_late, the latest ones.
const keptSkips = 100

// SkippedLateReason is the reason of a fire skipped by its misfire rule.
const SkippedLateReason = "missed: no gateway was running at its time, and the misfire rule does not run it late"

// runDue runs the fires anyone may claim now: planned ones that are due,
// and claimed ones whose claimer's lease ran out before their turn was
// stored.
func (s *Scheduler) runDue(ctx context.Context, now time.Time) error {
	fires, err := s.store.ClaimableFires(ctx, now, s.opts.Batch)
	if err != nil || len(fires) == 0 {
		return err
	}
	if len(fires) == s.opts.Batch {
		s.backlog.Store(true)
	}
	s.each(len(fires), func(i int) { s.runClaimable(ctx, fires[i], now) })
	return nil
}

// each runs fn(0..n-1) on the scheduler's workers and waits for them.
func (s *Scheduler) each(n int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, s.opts.Workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// runClaimable runs one fire found claimable: on time, it is run; late
// (no gateway ran at its time, or its claimer died), its schedule's
// misfire rule says whether it, a later one, or none runs.
func (s *Scheduler) runClaimable(ctx context.Context, f ledger.ScheduleFire, now time.Time) {
	name, sessionKey, reminder, ok := schedules.ParseKey(f.ScheduleKey)
	if !ok {
		s.settleUnrun(ctx, f, now, ledger.FireFailed, "not a schedule key chatgate knows")
		return
	}
	subject := schedules.OperatorKey(name)
	if reminder > 0 {
		subject = f.ScheduleKey
	}
	if f.State == ledger.FireClaimed && s.adoptStored(ctx, f, subject, now) {
		return
	}
	if reminder > 0 {
		r, err := s.store.Reminder(ctx, reminder)
		if err != nil {
			return // the next pass tries again
		}
		if r == nil || r.CancelledAt != nil {
			s.drop(ctx, f, now, "the reminder was cancelled")
			return
		}
		if !s.delivers(r.Channel) {
			return
		}
		s.took.Add(1)
		w, err := reminderWhen(r)
		if err != nil {
			s.settleUnrun(ctx, f, now, ledger.FireFailed, "the reminder's time cannot be read: "+err.Error())
			return
		}
		late := now.Sub(f.DueAt)
		if late > schedules.OnTime {
			d := schedules.Misfire{MaxLate: s.opts.ReminderMaxLate}.Catchup(w, f.DueAt.Add(-time.Nanosecond), now, keptSkips)
			d = withFirst(d, f.DueAt)
			s.release(ctx, f, d, now)
			s.logErr(s.decided(ctx, f.ScheduleKey, f.SessionKey, d, now, func(due time.Time) { s.runReminder(ctx, r, due, now) }))
			return
		}
		s.runReminder(ctx, r, f.DueAt, now)
		return
	}
	sc, ok := s.Schedules()[name]
	if !ok {
		s.dropLater(ctx, f, now, "the schedule is no longer in the configuration")
		return
	}
	if sessionKey == "" && sc.Target.AllSessions != (f.SessionKey == "") {
		s.dropLater(ctx, f, now, "the schedule's target changed since the fire was planned")
		return
	}
	if !sc.When.Next(f.DueAt.Add(-time.Nanosecond)).Equal(f.DueAt) {
		// Planned before a reload changed the schedule's times: the new
		// times are planned on their own (plan).
		s.dropLater(ctx, f, now, "the schedule's times changed since the fire was planned")
		return
	}
	if !s.delivers(sc.Target.Channel) {
		return
	}
	s.took.Add(1)
	if sessionKey == "" {
		// The schedule's own key: its next fire is planned from this one.
		defer s.planAfter(ctx, sc, f.ScheduleKey, f.DueAt, now)
	}
	if late := now.Sub(f.DueAt); late > schedules.OnTime {
		d := sc.Misfire.Catchup(sc.When, f.DueAt.Add(-time.Nanosecond), now, keptSkips)
		d = withFirst(d, f.DueAt)
		s.release(ctx, f, d, now)
		s.logErr(s.decided(ctx, f.ScheduleKey, f.SessionKey, d, now, func(due time.Time) { s.runOperator(ctx, sc, f.ScheduleKey, sessionKey, due, now) }))
		return
	}
	s.runOperator(ctx, sc, f.ScheduleKey, sessionKey, f.DueAt, now)
}

// adoptStored takes a fire whose claim lapsed after its message was
// stored (its runner died, or its store's answer was lost, before it
// recorded the turn): the fire runs on from that message — submitted
// again, it is found by its client id, its turn run here if nobody runs
// it, and the fire recorded and settled from it — whatever its misfire
// rule, budget or schedule now say, since its turn runs, or ran, all the
// same. It reports whether the fire had its message stored (or the store
// could not tell: a later pass looks again).
func (s *Scheduler) adoptStored(ctx context.Context, f ledger.ScheduleFire, subject string, now time.Time) bool {
	if f.SessionKey == "" {
		return false
	}
	t, err := s.store.TurnByClientID(ctx, f.SessionKey, ledger.FireMsgID(subject, f.DueAt))
	if err != nil || t == nil {
		s.logErr(err)
		return err != nil
	}
	conv, err := s.store.Conversation(ctx, t.ConversationID)
	if err != nil || conv == nil {
		s.logErr(err)
		return true
	}
	s.runFire(ctx, fireRun{key: f.ScheduleKey, subject: subject, due: f.DueAt, adopt: true,
		target: ScheduleTarget{Channel: conv.Channel, SessionKey: f.SessionKey, UserID: conv.UserID, ChatID: conv.ChatID},
		text:   "(stored)"}, now)
	return true
}

// release settles a claimed fire whose claim lapsed and that the misfire
// decision d does not run: SkipFires records only fires not written or
// planned, so a claimed one is taken and settled skipped here.
func (s *Scheduler) release(ctx context.Context, f ledger.ScheduleFire, d schedules.Decision, now time.Time) {
	if f.State != ledger.FireClaimed || (d.Run != nil && d.Run.Due.Equal(f.DueAt)) {
		return
	}
	held, ok, err := s.claim(ctx, f.ScheduleKey, f.DueAt, f.SessionKey, now)
	if err != nil || !ok {
		return
	}
	s.settleClaimed(ctx, held, ledger.FireSkippedLate, SkippedLateReason, now)
}

// planAfter plans the next fire of an operator schedule's key after the
// one due at due (or after now, when that is later: missed ones were
// decided by the misfire rule).
func (s *Scheduler) planAfter(ctx context.Context, sc OperatorSchedule, key string, due, now time.Time) {
	from := due
	if now.Sub(due) > schedules.OnTime {
		from = now
	}
	next := sc.When.Next(from)
	if next.IsZero() {
		return
	}
	if _, err := s.store.PlanFires(ctx, []ledger.ScheduleFire{{ScheduleKey: key, DueAt: next, SessionKey: sc.Target.SessionKey, CreatedAt: now}}); err != nil {
		s.logErr(err) // plan finds it unplanned on a later pass
		return
	}
	s.mu.Lock()
	s.planned[key] = next
	s.mu.Unlock()
}

// delivers reports whether the channel delivers replies here now: its
// route has Deliver. A fire of a channel that does not — the Telegram bot
// before getMe succeeded — is left for a later pass (or a replica whose
// channel delivers): run now, its turn would be stored untracked, its
// reply delivered to nobody and the fire settled sent all the same. Left
// due, it runs once the channel connects — late by the misfire rule if
// that takes longer than schedules.OnTime.
func (s *Scheduler) delivers(channel string) bool { return s.routes.delivering(channel) }

// fireKind is the kind a fire's metrics name: reminder or schedule.
func fireKind(key string) string {
	if _, _, id, ok := schedules.ParseKey(key); ok && id > 0 {
		return "reminder"
	}
	return "schedule"
}

func (s *Scheduler) logErr(err error) {
	if err != nil && s.base.Err() == nil {
		s.log.Warn("scheduler", slog.String("error", err.Error()))
	}
}

// latestOf is the latest of the times.
func latestOf(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
}
