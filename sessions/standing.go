package sessions

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// Standing is where a session stands — its status (Status), its user's
// spend against their budget (Usage), the models it may choose and
// whether its agent reads images (OffersModels, Models, ChooseModel,
// ReadsImages) — and where this replica stands: its running turns, the
// messages waiting for theirs, and the replicas alive beside it
// (RunningTurns, WaitingMessages, AliveReplicas). The turn path asks it,
// while running a turn, which model the turn uses (modelSpec), whether
// its user is over budget (overBudget) and what its appends spent
// (usageFor). Each Manager has one (Manager.Standing); the channels reach
// it through their Standing doors.
type Standing struct {
	store    standingStore
	turns    standingTurns
	load     turnLoad
	announce func(ledger.Event) // tells other replicas of a choice of model
	hot      *hotCache          // the active conversations (Standing.peek)
	now      func() time.Time
	log      *slog.Logger
	replica  string        // this replica's id (AliveReplicas)
	leaseTTL time.Duration // how fresh a live replica's heartbeat is

	choices *modelChoices // the models keys chose
	days    dayKeys       // a day's key, formatted once (Standing.usageFor)
	// timetable tells Status what a session has on the clock (nil:
	// nothing is told).
	timetable atomic.Pointer[Timetable]
}

// UseTimetable makes Status tell each session's reminders and the
// operator's schedules it gets, from t.
func (s *Standing) UseTimetable(t *Timetable) { s.timetable.Store(t) }

// standingStore is what Standing reads and writes of the store.
type standingStore interface {
	ModelChoice(ctx context.Context, key string) (string, error)
	SetModelChoice(ctx context.Context, key, name string, at time.Time) error
	UserUsage(ctx context.Context, user, day, monthStart string) (today, month ledger.UsageTotals, err error)
	ActiveConversation(ctx context.Context, key string) (*ledger.Conversation, error)
	RecentMessages(ctx context.Context, convID string, limit int) ([]ledger.Message, error)
	MessageCount(ctx context.Context, convID string) (int64, error)
	Replicas(ctx context.Context, self string, ttl time.Duration) (gone []ledger.Replica, alive []string, err error)
}

// standingTurns is what Standing needs of the turn path: the key's state
// lock, which status, models and choices are read and made under, and
// the settings and policies in force.
type standingTurns interface {
	acquire(ctx context.Context, key string) (func(), error)
	settings() *liveSettings
	Policy(channel string) Policy
}

// turnLoad is what Standing reads of the turn path's own state, kept
// under Manager.mu, for RunningTurns and WaitingMessages (managerLoad).
type turnLoad interface {
	runningTurns() int
	waitingMessages() (messages, keys int)
}

// standingConfig is what a Standing is built with besides its
// dependencies.
type standingConfig struct {
	ReplicaID string
	LeaseTTL  time.Duration
	Now       func() time.Time
	Logger    *slog.Logger
}

// newStanding returns the Standing of a Manager: turns is the turn path,
// load what it has in hand, hot its cache of active conversations, and
// announce how it tells other replicas of an event.
func newStanding(st standingStore, turns standingTurns, load turnLoad, hot *hotCache, announce func(ledger.Event), cfg standingConfig) *Standing {
	return &Standing{store: st, turns: turns, load: load, announce: announce, hot: hot,
		now: cfg.Now, log: cfg.Logger, replica: cfg.ReplicaID, leaseTTL: cfg.LeaseTTL, choices: newModelChoices()}
}

// Standing is where the sessions of m and m itself stand: status, usage
// and budgets, models, and the replica's load.
func (m *Manager) Standing() *Standing { return m.standing }
