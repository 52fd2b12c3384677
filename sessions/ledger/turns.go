package ledger

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// The turn ledger: every user message is a turn, and its row carries the
// turn's owner and claim. A turn is a small state machine whose every
// transition is conditional, so that exactly one runner wins whichever
// path it comes from — the live message, a resend, a Telegram
// redelivery, the rescuer after a restart, or another replica:
//
//	pending ─┐                                         ┌─ answered ─┐
//	         ├─ claim ─> running(owner, attempt) ──────┼─ failed   ─┼─> delivered
//	interrupted ┘               │                      └─ expired  ─┘   (channels that confirm)
//	                            └─ shutdown ─> interrupted
//
// A claim is (owner, attempt): the replica holding the turn and the number
// of the claim. A claim lasts as long as its owner's lease: replicas
// heartbeat a row of their own, and the turns of a replica whose
// heartbeat stopped are claimable by the others (the rescuer finds them
// among the open turns when it sees a replica die, and once at start).
// Claiming a turn also moves its conversation's epoch, which every append
// checks beside the last seq: the runner the turn was taken from finds its
// reply's append refused. A turn is answered when its final reply is
// stored after it — the reply's append is the transition, and in the same
// transaction it marks the turn's messages answered, which takes them out
// of the index of open turns (ix_messages_open, below); the rare paths (a
// resend, a claim, the rescuer's scans) read the open turns and look their
// replies up in the primary key's range after them. turn_due marks the turns nobody owns that somebody may claim — turns a
// shutdown interrupted, deliveries handed back for a retry — and only

// Turn states.
const (
	TurnPending     = "pending"     // stored, waiting to be claimed
	TurnRunning     = "running"     // claimed: the agent runs for it
	TurnInterrupted = "interrupted" // a shutdown cut it; claimable at once
	TurnAnswered    = "answered"    // its reply is stored
	TurnFailed      = "failed"      // its reply is a stored failure notice
	TurnExpired     = "expired"     // too old to run when found; told so
	TurnDelivered   = "delivered"   // the channel confirmed the reply reached the user
)

// ErrLostClaim means a turn's claim was taken over (its owner was taken
// for dead and another runner claimed it): the write that needed the claim
// was not made.
var ErrLostClaim = errors.New("turn claimed by another runner")

// LeaseTTL is how long a replica holds its turns and session leases after
// its last heartbeat; it beats every third of that. A claim lasts as long
// as its owner's lease.
const LeaseTTL = 30 * time.Second

// Turn is the ledger state of one user message's turn. State is derived:
// answered, failed or expired once a final reply is stored (ReplySeq),
// delivered once the channel marked it.
type Turn struct {
	ConversationID string
	Seq            int64
	ClientMsgID    *string
	State          string
	Owner          string
	Attempts       int // claims so far
	DueAt          *time.Time
	Track          bool
	ReplySeq       int64
	DeliveryRef    string
	DeliveredAt    *time.Time
	Error          string
	CreatedAt      time.Time
	// Lead is the message whose seq the turn's reply answers: the newest
	// of the burst it was merged into, or Seq itself.
	Lead int64
}

// TurnOf is the turn a stored user message carries.
func TurnOf(m *Message) *Turn {
	t := &Turn{ConversationID: m.ConversationID, Seq: m.Seq, ClientMsgID: m.ClientMsgID, State: m.TurnState, Owner: m.TurnOwner,
		Attempts: m.TurnAttempt, DueAt: m.TurnDue, Track: m.TurnTrack, DeliveryRef: m.DeliveryRef,
		DeliveredAt: m.DeliveredAt, Error: m.Error, CreatedAt: m.CreatedAt, Lead: m.TurnLead}
	if t.Lead == 0 {
		t.Lead = m.Seq
	}
	return t
}

// ApplyReply applies a stored final reply to the turn's state.
func (t *Turn) ApplyReply(reply *Message) {
	t.ReplySeq = reply.Seq
	switch {
	case t.State == TurnDelivered:
	case reply.Status == MsgFailed && strings.HasPrefix(reply.Error, NotRunPrefix):
		t.State = TurnExpired
	case reply.Status == MsgFailed:
		t.State = TurnFailed
	default:
		t.State = TurnAnswered
	}
}

// Settled reports whether the turn has its reply stored.
func (t *Turn) Settled() bool {
	switch t.State {
	case TurnAnswered, TurnFailed, TurnExpired, TurnDelivered:
		return true
	}
	return false
}

// Owned reports whether the turn is held by its owner (not due for
// anyone): running, or answered and waiting for its delivery mark.
func (t *Turn) Owned() bool {
	return t.Owner != "" && t.DueAt == nil && (t.State == TurnRunning || (t.Track && t.Settled() && t.State != TurnDelivered))
}

// Settle hands a turn back with the partial reply of a shutdown, in the
// same transaction, guarded by the claim: the turn becomes interrupted,
// owned by nobody and due again at DueAt.
type Settle struct {
	Owner   string
	Attempt int
	DueAt   *time.Time
}

// DueTurn is a turn somebody may claim, with what running and delivering
// it need, and the claim it was seen under (compared when claiming).
type DueTurn struct {
	ConversationID string
	Seq            int64
	SessionKey     string
	Channel        string
	State          string
	ClientMsgID    string
	CreatedAt      time.Time
	UserID         string
	ChatID         string
	Owner          string
	Attempt        int
}

// Claimed is a turn this runner won.
type Claimed struct {
	DueTurn
	Track bool
	// Answered: its reply is stored; the claim is for delivering it.
	Answered bool
}

// Ref names the claim.
func (c *Claimed) Ref() TurnRef {
	return TurnRef{ConversationID: c.ConversationID, Seq: c.Seq, Claim: strconv.Itoa(c.Attempt)}
}

// Batch is a burst of user messages one claim took as one turn: its
// rows oldest first, the newest the lead (the reply's reply_to), all
// under one claim (owner, Attempt).
type Batch struct {
	ConversationID string
	Attempt        int
	Rows           []BatchRow
	// Took is true when a row was taken from another runner (a gone
	// replica's, or one handed back): the claim moved the conversation's
	// epoch. LastSeq and Epoch are the conversation's after the claim.
	Took    bool
	LastSeq int64
	Epoch   int64
	// Foreign is true when a message came to another replica: its
	// clients there learn of the reply through this replica's events.
	Foreign bool
}

// BatchRow is one message of a batch.
type BatchRow struct {
	Seq         int64
	ClientMsgID string
	Content     string
	Attachments string // stored JSON, see Message.Attachments
	Quote       string // see Message.Quote
	CreatedAt   time.Time
}

// Lead is the newest message's seq.
func (b *Batch) Lead() int64 { return b.Rows[len(b.Rows)-1].Seq }

// Seqs are the batch's messages, oldest first (the lead last).
func (b *Batch) Seqs() []int64 {
	out := make([]int64, len(b.Rows))
	for i, r := range b.Rows {
		out[i] = r.Seq
	}
	return out
}

// Ref names the batch's claim, for delivering its reply.
func (b *Batch) Ref() TurnRef {
	return TurnRef{ConversationID: b.ConversationID, Seq: b.Lead(), Claim: strconv.Itoa(b.Attempt)}
}

// ClaimAtStore makes m, a user message about to be stored, its own turn,
// claimed by its owner as ClaimBatch would claim it: running, the first
// attempt, its own lead, tracked when its channel confirms delivery. The
// domain stores a message so only when nothing of its conversation waits
// or runs, so that a claim would find it alone anyway.
func ClaimAtStore(m *Message, track bool) {
	m.TurnState, m.TurnAttempt, m.TurnLead, m.TurnTrack = TurnRunning, 1, m.Seq, track
}

// StoredClaim is the batch of a message stored claimed (ClaimAtStore),
// once conv's append of it landed: its one row, under that claim.
func StoredClaim(conv *Conversation, m *Message) *Batch {
	return &Batch{ConversationID: conv.ID, Attempt: m.TurnAttempt, LastSeq: conv.LastSeq, Epoch: conv.Epoch,
		Rows: []BatchRow{RowOf(m)}}
}

// RowOf is a user message as a batch carries it.
func RowOf(m *Message) BatchRow {
	r := BatchRow{Seq: m.Seq, Content: m.Content, Attachments: m.Attachments, Quote: m.Quote, CreatedAt: m.CreatedAt}
	if m.ClientMsgID != nil {
		r.ClientMsgID = *m.ClientMsgID
	}
	return r
}

// Claim asks ClaimBatch for the claimable turns of a conversation.
type Claim struct {
	ConversationID string
	Owner          string
	// Held are the seqs of the conversation's messages a runner of Owner
	// holds now (in memory): Owner's other turns in the conversation are
	// its own to claim again — a turn nobody runs, whose earlier claim
	// failed or whose answer was lost.
	Held []int64
	// TakeOver takes the turns of owners not in Alive (replicas that
	// stopped heartbeating).
	TakeOver bool
	Alive    []string
	Now      time.Time
	Limit    int
	// Track: the channel confirms delivery (the lead's turn stays open
	// until it is marked delivered).
	Track bool
}

// TurnRef names a turn and, when set, the claim its holder delivers under.
type TurnRef struct {
	ConversationID string
	Seq            int64
	Claim          string
}

// OpenStates are the states of a turn that is not settled: stored and
// waiting, handed back, or running. Only user messages have turns.
var OpenStates = []string{TurnPending, TurnInterrupted, TurnRunning}

// RecoveryHorizon bounds how far back the rescuer looks for turns of gone
// replicas at start, and the upgrade for unanswered messages: older ones
// are left alone.
const RecoveryHorizon = 7 * 24 * time.Hour

// Errors of the ledger's conditional writes.
var (
	// ErrStale means a conditional write found the conversation changed:
	// archived, or appended to by someone else. The caller reloads.
	ErrStale = errors.New("conversation changed underneath")
	// ErrDuplicate means the client message id is already stored.
	ErrDuplicate = errors.New("client message id already stored")
	// ErrClosed means the store was closed.
	ErrClosed = errors.New("store closed")
	// ErrRejected means the database refused what a write carries and
	// will refuse it every time (PostgreSQL's data exceptions, a value
	// past a limit): the write did not land, and trying it again cannot
	// help. The turn that made it fails instead of waiting on it.
	ErrRejected = errors.New("storage rejected the data for good")
)

// Append is one conditional append of messages to a conversation.
type Append struct {
	Conv *Conversation
	// ExpectSeq is the conversation's LastSeq the caller saw; the append
	// fails with ErrStale when it moved.
	ExpectSeq int64
	// RequireActive refuses the append to an archived conversation (a user
	// message must open a new conversation instead).
	RequireActive bool
	Messages      []Message
	At            time.Time
	// KeepActivity leaves the conversation's last activity as it is: the
	// messages are a fire's turn, which is not the user's activity (an
	// idle reset counts from the user's last message, not the bot's own
	// schedule).
	KeepActivity bool
	Tokens       int64
	Cost         float64
	Model        string
	// Settle, when set, hands the turn of user message TurnSeq back in the
	// same transaction (interrupted by a shutdown: claimable again), guarded
	// by its claim: the append fails with ErrLostClaim when the claim was
	// taken over.
	Settle  *Settle
	TurnSeq int64
	// Answers are the user messages a final reply among Messages answers,
	// by seq: its burst, as the claim took it. The same transaction marks
	// those still open answered — only those the reply answers (its lead,
	// or merged into it, stored before it); none given is the lead alone.
	Answers []int64
	// Usage, when set, is tallied in the same transaction.
	Usage *Usage
	// NotesOf, when set on a store whose notes other processes write
	// (PostgreSQL), asks for that user's count of notes' changes
	// (NotesVersion.Changes), read in the same transaction after its
	// writes: NotesRead gets it as soon as it is read — before the
	// commit's outcome is known, which the append's return tells — and
	// never when the store read none. It may be called more than once (a
	// batch run again) and must not block.
	NotesOf   string
	NotesRead func(changes int64)
}

// Archived is a conversation a sweep archived.
type Archived struct {
	ID         string
	SessionKey string
	Channel    string
	LastSeq    int64 // 0: the conversation was empty
}

// Reopen is one swap of a session key's active conversation for an
// archived one.
type Reopen struct {
	SessionKey string
	// Current is the active conversation to archive (reason manual), ""
	// when the key has none; ExpectSeq its LastSeq as the caller saw it.
	Current   string
	ExpectSeq int64
	// Previous is the archived conversation to make active again.
	Previous string
	At       time.Time
	// StartedAt, when set, moves the reopened conversation's start (so
	// that a daily reset does not take it again at once).
	StartedAt *time.Time
}
