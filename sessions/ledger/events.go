package ledger

// Event kinds.
const (
	EventReply = "reply"
	EventReset = "reset"
	EventHello = "hello" // a replica started listening
	// EventWant asks the replica holding a key's session lease to give it
	// back (the store's kept leases).
	EventWant = "want"
	// EventModel tells that a session key chose another model: its
	// receivers read the choice again.
	EventModel = "model"
	// EventAsk tells that a turn put a tool call (Call) up for its user's
	// decision: the receivers' channels ask the user's clients connected
	// there. The receiver reads the call; the event names it only.
	EventAsk = "ask"
	// EventAskSettled tells that an ask is over (State: how, as channels
	// show it) — or, with no Channel, that a decision was stored, so that
	// the turn waiting for it, wherever it runs, reads it at once.
	EventAskSettled = "asked"
)

// Event is what replicas sharing a database tell each other: that a
// turn's reply was stored, that a conversation was reset, that a tool
// call asks its user or was decided, that a replica listens, or that one
// wants a lease another keeps. It only wakes others
// up: it carries ids, never text, and its receiver reads the rows, which
// stay the truth. PostgreSQL limits a payload to 8000 bytes; ids and
// seqs stay far below that.
type Event struct {
	Kind    string `json:"k"`
	Origin  string `json:"o"` // the replica that published it
	Channel string `json:"ch"`
	Key     string `json:"key"`
	// Conv is the reply's conversation, or the conversation a reset
	// opened ("" for sweeps: the next message opens one).
	Conv   string `json:"c,omitempty"`
	Seq    int64  `json:"s,omitempty"`   // reply: the user message's seq
	Reply  int64  `json:"r,omitempty"`   // reply: the reply's seq
	State  string `json:"st,omitempty"`  // reply: the turn's state; asked: the ask's end
	Old    string `json:"old,omitempty"` // reset: the archived conversation
	Reason string `json:"why,omitempty"` // reset: manual, idle, daily
	// Call is the tool call's ledger id (ask, asked); Seq is then the
	// lead of the turn that asked.
	Call int64 `json:"call,omitempty"`
	// Missed is set on the event a listener gets after its connection
	// came back: notifications sent meanwhile are lost. It is never sent.
	Missed bool `json:"-"`
}
