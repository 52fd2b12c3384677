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
)

// Event is what replicas sharing a database tell each other: that a
// turn's reply was stored, that a conversation was reset, that a replica
// listens, or that one wants a lease another keeps. It only wakes others
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
	State  string `json:"st,omitempty"`  // reply: the turn's state
	Old    string `json:"old,omitempty"` // reset: the archived conversation
	Reason string `json:"why,omitempty"` // reset: manual, idle, daily
	// Missed is set on the event a listener gets after its connection
	// came back: notifications sent meanwhile are lost. It is never sent.
	Missed bool `json:"-"`
}
