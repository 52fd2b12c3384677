package sessions

import (
	"context"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// The ports: what the session manager consumes from the layers below it,
// declared here, by the consumer. Package store implements Store on GORM
// for SQLite and PostgreSQL (and its notifier, Events); the records the
// ports carry, and the ledger's rules, are package ledger's.

// Ledger is what a turn needs from storage on its way from a stored
// message to a delivered reply: the conversation it belongs to, the
// appends, the claims and their settling, the replicas' liveness and the
// session leases. Every call may fail: a turn's state after any failed
// call is still one the ledger recovers from (see watcher.After), which the
// fault-injection tests prove by failing each call in turn.
type Ledger interface {
	ActiveConversation(ctx context.Context, key string) (*ledger.Conversation, error)
	Conversation(ctx context.Context, id string) (*ledger.Conversation, error)
	CreateConversation(ctx context.Context, c *ledger.Conversation) error
	RecentMessages(ctx context.Context, convID string, limit int) ([]ledger.Message, error)
	MessageByClientID(ctx context.Context, convID, clientID string) (*ledger.Message, error)
	// EditPending replaces the text of user message seq if its turn has
	// not started (pending, never claimed); false when it had.
	EditPending(ctx context.Context, convID string, seq int64, text string) (bool, error)
	Message(ctx context.Context, convID string, seq int64) (*ledger.Message, error)
	FinalReply(ctx context.Context, convID string, userSeq int64) (*ledger.Message, error)
	Append(ctx context.Context, a ledger.Append) error
	Archive(ctx context.Context, convID, reason string, at time.Time, expectSeq int64) (bool, error)
	TurnAt(ctx context.Context, convID string, seq int64) (*ledger.Turn, error)
	TurnByClientID(ctx context.Context, key, clientID string) (*ledger.Turn, error)
	DueTurns(ctx context.Context, now time.Time, limit int) ([]ledger.DueTurn, error)
	OrphanTurns(ctx context.Context, since time.Time, alive []string, limit int) ([]ledger.DueTurn, error)
	OwnTurns(ctx context.Context, convID, owner string) ([]ledger.DueTurn, error)
	ClaimTurn(ctx context.Context, convID string, seq int64, seenOwner string, seenAttempt int, owner string, now time.Time) (*ledger.Claimed, error)
	ClaimBatch(ctx context.Context, c ledger.Claim) (*ledger.Batch, error)
	Covers(ctx context.Context, convID string, lead int64) ([]ledger.BatchRow, error)
	ReleaseTurn(ctx context.Context, convID string, seq int64, owner string, attempt int, dueAt time.Time, why string) error
	MarkDelivered(ctx context.Context, convID string, seq int64, owner string, attempt int, ref, failure string, at time.Time) error
	Heartbeat(ctx context.Context, replica string, started time.Time) error
	Replicas(ctx context.Context, self string, ttl time.Duration) (gone []ledger.Replica, alive []string, err error)
	ForgetReplica(ctx context.Context, id string, heartbeat time.Time) error
	Retire(ctx context.Context, replica string) error
	Lease(ctx context.Context, key, replica string, ttl time.Duration) (release func(), err error)
	ToolLedger
}

// ToolLedger is what a turn's tool calls need from storage: each call's
// record and its conditional moves (ledger.ToolCall).
type ToolLedger interface {
	OpenToolCalls(ctx context.Context, calls []ledger.ToolCall) ([]ledger.ToolCall, error)
	ToolCalls(ctx context.Context, convID string, msgSeq int64) ([]ledger.ToolCall, error)
	ToolCall(ctx context.Context, id int64) (*ledger.ToolCall, error)
	AskTool(ctx context.Context, id int64, claim ledger.TurnClaim, expires time.Time) error
	SetToolAskRef(ctx context.Context, id int64, ref string) error
	DecideTool(ctx context.Context, id int64, allow bool, by, deniedResult string, at time.Time) (bool, error)
	StartTool(ctx context.Context, id int64, claim ledger.TurnClaim, token, again string, at time.Time) error
	EndTool(ctx context.Context, e ledger.ToolEnd) error
	AskingToolCalls(ctx context.Context, key string) ([]ledger.ToolCall, error)
	ToolMediaLedger
}

// ToolMediaLedger is what the media tool calls returned need from
// storage (ledger.ToolMedia): stored with their call's outcome (EndTool),
// read by turn for its reply and by id for a channel's fetch, and claimed
// for a send and marked delivered item by item.
type ToolMediaLedger interface {
	ToolMediaOfTurn(ctx context.Context, convID string, turn int64) ([]ledger.ToolMedia, error)
	ToolMedia(ctx context.Context, id string) (*ledger.ToolMedia, error)
	// ToolMediaInfo is ToolMedia without the bytes.
	ToolMediaInfo(ctx context.Context, id string) (*ledger.ToolMedia, error)
	ClaimMediaSend(ctx context.Context, id, claim string, at time.Time) (ledger.MediaClaim, int, error)
	ReleaseMediaSend(ctx context.Context, id, claim string) error
	MarkMediaDelivered(ctx context.Context, id, ref string, at time.Time) (bool, error)
}

// Store is what the session manager needs from a database: the ledger,
// and what sweeps, resumes, retention and the channels' own state need.
// store.DB implements it on GORM for SQLite and PostgreSQL.
type Store interface {
	Ledger
	FireLedger
	Observed
	ReminderStore
	NoteStore
	MessagesAfter(ctx context.Context, convID string, afterSeq int64, limit int) ([]ledger.Message, error)
	// UserUsage is a user's tallied spend on day and in its month from
	// monthStart (days as YYYY-MM-DD).
	UserUsage(ctx context.Context, user, day, monthStart string) (today, month ledger.UsageTotals, err error)
	// LastArchived and Reopen take a key back to its previous
	// conversation.
	LastArchived(ctx context.Context, key string) (*ledger.Conversation, error)
	Reopen(ctx context.Context, r ledger.Reopen) error
	SweepIdle(ctx context.Context, channel string, cutoff, at time.Time, each func([]ledger.Archived)) (int, error)
	SweepDaily(ctx context.Context, channel string, boundary, at time.Time, each func([]ledger.Archived)) (int, error)
	Purge(ctx context.Context, archivedBefore time.Time) (int64, error)
	Exclusive(ctx context.Context, name string, fn func() error) (bool, error)
	// Shared reports whether several gateways may use the database at
	// once (PostgreSQL); SQLite serves one.
	Shared() bool
	GetState(ctx context.Context, key string) (string, error)
	SetState(ctx context.Context, key, value string) error
	// Retention of states and guests (Sweeper.PurgeStates, Sweeper.PurgeGuests).
	StateRows(ctx context.Context, prefix, after string, limit int) ([]ledger.ChannelState, error)
	DeleteStates(ctx context.Context, names []string) (int64, error)
	KeysWithConversations(ctx context.Context, keys []string) (map[string]bool, error)
	IdleActive(ctx context.Context, channel, keyPrefix string, cutoff time.Time, limit int) ([]ledger.Conversation, error)
	DeleteIdle(ctx context.Context, convID string, cutoff time.Time) (bool, error)
	// The models keys chose, and the lines of a
	// conversation, for /status.
	ModelChoice(ctx context.Context, key string) (string, error)
	SetModelChoice(ctx context.Context, key, name string, at time.Time) error
	PurgeModelChoices(ctx context.Context, cutoff time.Time) (int64, error)
	// PurgeFires deletes the schedules' fires settled before a cutoff
	// (the retention purge), but for each schedule's latest.
	PurgeFires(ctx context.Context, endedBefore time.Time) (int64, error)
	MessageCount(ctx context.Context, convID string) (int64, error)
	Close() error
}

// FireLedger is what the Scheduler needs of the ledger's schedule fires
// and reminders (ledger.ScheduleFire, ledger.Reminder): each fire is a
// row claimed by one conditional statement, so that exactly one runner
// on any replica runs it.
type FireLedger interface {
	ClaimFire(ctx context.Context, c ledger.FireClaim) (ledger.FireHeld, bool, error)
	PlanFires(ctx context.Context, fires []ledger.ScheduleFire) (int64, error)
	SkipFires(ctx context.Context, key, sessionKey string, dues []time.Time, reason string, at time.Time) (int64, error)
	StoreFireTurn(ctx context.Context, h ledger.FireHeld, convID string, seq int64, at time.Time) error
	SettleFire(ctx context.Context, e ledger.FireEnd) error
	ClaimableFires(ctx context.Context, now time.Time, limit int) ([]ledger.ScheduleFire, error)
	StoredFires(ctx context.Context, limit int) ([]ledger.ScheduleFire, error)
	LatestFire(ctx context.Context, key string) (time.Time, bool, error)
	DueReminders(ctx context.Context, now time.Time, limit int) ([]ledger.Reminder, error)
	Reminder(ctx context.Context, id int64) (*ledger.Reminder, error)
	AdvanceReminder(ctx context.Context, id int64, from time.Time, next *time.Time) (bool, error)
	OptedIn(ctx context.Context, schedule, channel, after string, limit int) ([]string, error)
	// The end of what keeps failing to deliver (Scheduler.stopUndeliverable).
	CancelReminder(ctx context.Context, id int64, sessionKey string, at time.Time) (bool, error)
	SetScheduleOptIn(ctx context.Context, o ledger.ScheduleOptIn, on bool) error
}

// Observed is a store whose every ledger call passes its hooks
// (ledger.Hook): the manager watches its calls through one (watcher),
// and a test's fault injector fails them through another.
type Observed interface {
	Observe(h ledger.Hook) (remove func())
}

// Events is what replicas sharing a database tell each other
// (store.DB.Events: LISTEN/NOTIFY on PostgreSQL; nothing on SQLite).
type Events interface {
	// Publish sends ev to every listening replica; it never blocks.
	Publish(ev ledger.Event)
	// Listen registers fn for every event (this replica's own included)
	// and returns once events are being received, or when ctx ends.
	Listen(ctx context.Context, fn func(ledger.Event)) error
}
