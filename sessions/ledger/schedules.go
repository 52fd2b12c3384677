package ledger

import (
	"strconv"
	"strings"
	"time"
)

// Schedules ride the ledger too. Each due time of a schedule — an
// operator's (bot.yaml) or a user's reminder — is one fire, the row
// (schedule key, due time): whoever inserts or moves that row by one
// conditional statement runs it, and nobody else, on any replica. Its life:
//
//	due ──> claimed(owner, attempt, lease) ──> stored ──> sent | quiet | failed
//	 │        │  (lease expired: claimed again, attempt+1)
//	 │        └──> skipped_budget | failed
//	 └──> skipped_late
//
// A fire may be written due ahead of its time (planned) or inserted
// claimed at its time; either way the claim is the one statement that
// takes it. Once its turn is stored the turn ledger runs it as any turn,
// and the fire records how it ended: its reply sent (with the channel's
// reference), stored and not sent (a quiet schedule's "nothing to report"),
// or failed. A fire missed while no gateway ran is recorded skipped_late
// rather than run, but for the one the misfire rule runs late.

// Fire states.
const (
	FireDue           = "due"
	FireClaimed       = "claimed"
	FireStored        = "stored" // its turn is stored; the turn ledger runs it
	FireSent          = "sent"
	FireQuiet         = "quiet"
	FireSkippedLate   = "skipped_late"
	FireSkippedBudget = "skipped_budget"
	FireFailed        = "failed"
	// FireDropped: its schedule was removed, its times or target changed,
	// or its reminder was cancelled, before it ran: nothing ran or was
	// sent, by the operator's or the user's choice.
	FireDropped = "dropped"
)

// FireSettled reports whether a fire in state is over: it is never
// claimed, run or sent again.
func FireSettled(state string) bool {
	switch state {
	case FireSent, FireQuiet, FireSkippedLate, FireSkippedBudget, FireFailed, FireDropped:
		return true
	}
	return false
}

// ScheduleFire is one fire of a schedule: the schedule's key
// (schedules.OperatorKey, schedules.ReminderKey, ...) and the due time.
// Due times are kept in UTC to the microsecond, the precision both
// databases keep.
type ScheduleFire struct {
	ScheduleKey string    `gorm:"primaryKey;size:255"`
	DueAt       time.Time `gorm:"primaryKey;autoIncrement:false;index:ix_schedule_fires_due,where:state = 'due'"`
	// SessionKey is the conversation the fire's turn goes to ("" until
	// the fire is claimed, for a fire planned before its session was
	// known).
	SessionKey string `gorm:"size:255;not null;default:'';index:ix_schedule_fires_session"`
	// Fires whose turn is stored are found through their own partial
	// index: the scheduler settles each once its turn has ended.
	State string `gorm:"size:16;not null;index:ix_schedule_fires_stored,where:state = 'stored'"`
	// The claim: who took the fire, how many times it was taken, and
	// until when the taker holds it without storing its turn (then any
	// replica may take it again).
	Owner      string     `gorm:"size:64;not null;default:''"`
	Attempt    int        `gorm:"not null;default:0"`
	LeaseUntil *time.Time `gorm:"index:ix_schedule_fires_lease,where:state = 'claimed'"`
	// LateMS is how late the fire was claimed, in milliseconds.
	LateMS int64 `gorm:"not null;default:0"`
	// The turn: its conversation and the seq of the fire's message.
	ConversationID string `gorm:"size:36;not null;default:''"`
	TurnSeq        int64  `gorm:"not null;default:0"`
	// DeliveryRef is the channel's reference to what it sent (a Telegram
	// message id).
	DeliveryRef string `gorm:"size:255;not null;default:''"`
	// Reason says why a fire was skipped or failed.
	Reason    string    `gorm:"type:text;not null;default:''"`
	CreatedAt time.Time `gorm:"not null"`
	ClaimedAt *time.Time
	StoredAt  *time.Time
	EndedAt   *time.Time
}

// FireClaim is what a runner claims a fire with.
type FireClaim struct {
	ScheduleKey string
	DueAt       time.Time
	SessionKey  string
	Owner       string
	// LeaseUntil is until when the claim holds without the fire's turn
	// stored.
	LeaseUntil time.Time
	At         time.Time
}

// FireHeld is a claimed fire as its holder names it in the writes that
// need the claim: the fire, its owner and the attempt it claimed.
type FireHeld struct {
	ScheduleKey string
	DueAt       time.Time
	Owner       string
	Attempt     int
}

// FireEnd settles a fire: from state From to State (FireSettled), with
// the reason or delivery reference. From FireClaimed it needs the claim
// (Held); from FireStored it does not (the turn ledger held the turn).
type FireEnd struct {
	ScheduleKey string
	DueAt       time.Time
	From        string
	Owner       string // From FireClaimed: the claim's
	Attempt     int
	State       string
	Reason      string
	DeliveryRef string
	At          time.Time
}

// Reminder is a schedule a user made in the chat, kept until cancelled:
// its times as a schedules.Spec's Text in Timezone, and the text the model
// gets at each fire. NextDueAt is its next due time, and nil once it is
// due no more (a one-time reminder that fired, or one cancelled): only
// due reminders enter its index.
type Reminder struct {
	ID int64 `gorm:"primaryKey;autoIncrement"`
	// SessionKey is the owner: the session whose conversation its turns
	// are, and whose limits it counts against.
	SessionKey  string     `gorm:"size:255;not null;index:ix_reminders_owner,where:cancelled_at IS NULL"`
	Channel     string     `gorm:"size:32;not null"`
	Spec        string     `gorm:"size:255;not null"`
	Timezone    string     `gorm:"size:64;not null;default:''"`
	Text        string     `gorm:"type:text;not null"`
	NextDueAt   *time.Time `gorm:"index:ix_reminders_due,where:next_due_at IS NOT NULL"`
	CreatedAt   time.Time  `gorm:"not null"`
	CancelledAt *time.Time
	// CallKey is the idempotency key of the tool call that made the
	// reminder ("" for one made otherwise): a call run again after a
	// crash finds the reminder it made the first time instead of making
	// a second.
	CallKey string `gorm:"size:255;not null;default:'';uniqueIndex:ux_reminders_call_key,where:call_key <> ''"`
}

// ScheduleOptIn is a session's choice to get the turns of an operator
// schedule that goes to every session of its channel that opted in
// (target all_sessions): one row per session and schedule name. No row,
// no turn: sessions are out until their user opts in.
type ScheduleOptIn struct {
	SessionKey string    `gorm:"primaryKey;size:255;index:ix_schedule_opt_ins_schedule,priority:3"`
	Schedule   string    `gorm:"primaryKey;size:64;index:ix_schedule_opt_ins_schedule,priority:1"`
	Channel    string    `gorm:"size:32;not null;index:ix_schedule_opt_ins_schedule,priority:2"`
	CreatedAt  time.Time `gorm:"not null"`
}

// A fire's turn is stored as a user-role message whose client id names
// the fire: FireMsgPrefix, the schedule's subject (schedules.OperatorKey
// of its name, or schedules.ReminderKey) and the due time in Unix
// seconds. The id is what makes the fire's message once-only: a fire
// claimed again after a crash stores nothing new, it finds its message.
// Channels never store ids with the prefix (sessions refuses them), so a
// user cannot take a fire's place, and a turn is scheduled exactly when
// its message's id has it.
const FireMsgPrefix = "fire:"

// FireMsgID is the client id of the message of subject's fire due at due.
func FireMsgID(subject string, due time.Time) string {
	return FireMsgPrefix + subject + "@" + strconv.FormatInt(due.Unix(), 10)
}

// IsFireMsgID reports whether a client id is a fire's.
func IsFireMsgID(id string) bool { return strings.HasPrefix(id, FireMsgPrefix) }

// ParseFireMsgID reads a fire's client id back: the subject and the due
// time (to the second).
func ParseFireMsgID(id string) (subject string, due time.Time, ok bool) {
	rest, found := strings.CutPrefix(id, FireMsgPrefix)
	if !found {
		return "", time.Time{}, false
	}
	at := strings.LastIndexByte(rest, '@')
	if at <= 0 {
		return "", time.Time{}, false
	}
	sec, err := strconv.ParseInt(rest[at+1:], 10, 64)
	if err != nil {
		return "", time.Time{}, false
	}
	return rest[:at], time.Unix(sec, 0).UTC(), true
}
