package ledger

import (
	"strings"
	"time"
	"unicode"
)

// Memory: what the bot keeps about one user across conversations. Resets
// give the model a clean context; notes carry what should outlive them —
// the user's name, their projects, what they asked the bot never to do
// again. A note belongs to one user (UsageUser of a session key: a
// topic's conversations are their chat's user), is never read for
// another, and is deleted, not archived, when forgotten: notes are the
// user's data.

// Who wrote a note.
const (
	NoteByModel    = "model"    // the model, through the memory tools
	NoteByUser     = "user"     // the user, by a command or a frame
	NoteByOperator = "operator" // the operator, through the admin API
	NoteByReset    = "reset"    // extracted from a conversation at its reset
)

// Note is one note about a user.
type Note struct {
	ID int64 `gorm:"primaryKey;autoIncrement" json:"id"`
	// UserKey is whose note it is: UsageUser of the session key.
	UserKey string `gorm:"size:255;not null;index:ix_notes_user,priority:1" json:"user"`
	Text    string `gorm:"type:text;not null" json:"text"`
	Author  string `gorm:"size:16;not null" json:"author"`
	// Where it came from: the conversation and the message (0: none, as
	// for the operator's).
	ConversationID string `gorm:"size:36;not null;default:''" json:"conversation_id,omitempty"`
	MessageSeq     int64  `gorm:"not null;default:0" json:"message_seq,omitempty"`
	// CallKey names what wrote it — a tool call's idempotency key, an
	// extraction's conversation — so that the same writer run again after
	// a crash writes it once ("" for none).
	CallKey   string    `gorm:"size:128;not null;default:'';index:uq_notes_call,unique,where:call_key <> ''" json:"-"`
	CreatedAt time.Time `gorm:"not null;index:ix_notes_user,priority:2" json:"created_at"`
}

// Extraction states (Extraction.State).
const (
	ExtractDue      = "due"     // waiting to be claimed
	ExtractRunning  = "running" // claimed: its model call is being made
	ExtractDone     = "done"    // its notes are stored (Notes of them, maybe none)
	ExtractSkipped  = "skipped" // not made: memory or extraction is off now, or nothing to read
	ExtractRefused  = "refused" // not made: the user is over their budget
	ExtractFailed   = "failed"  // its model call failed every attempt
	MaxExtractTries = 3
)

// Extraction is the job of writing an archived conversation's notes
// (session.memory.extract_on_reset): one row per conversation, made when
// it is archived, claimed by one statement for a lease, and settled in
// the transaction that stores its notes — so that a run cut by a crash
// leaves the row to be claimed again and no note of it stored, and a run
// that stored its notes is never made again.
type Extraction struct {
	ConversationID string `gorm:"primaryKey;size:36" json:"conversation_id"`
	SessionKey     string `gorm:"size:255;not null" json:"session_key"`
	Channel        string `gorm:"size:32;not null" json:"channel"`
	// UserKey is whose notes it writes (sessions.MemoryUser).
	UserKey string `gorm:"size:255;not null" json:"user"`
	State   string `gorm:"size:16;not null;index:ix_extractions_state,priority:1" json:"state"`
	// Owner is the replica whose claim holds it, until LeaseUntil; a due
	// row is not claimed before LeaseUntil (a retry's pause).
	Owner      string     `gorm:"size:64;not null;default:''" json:"owner,omitempty"`
	LeaseUntil *time.Time `gorm:"index:ix_extractions_state,priority:2" json:"lease_until,omitempty"`
	Attempt    int        `gorm:"not null;default:0" json:"attempt"`
	Notes      int        `gorm:"not null;default:0" json:"notes"`
	Error      string     `gorm:"type:text;not null;default:''" json:"error,omitempty"`
	CreatedAt  time.Time  `gorm:"not null" json:"created_at"`
	EndedAt    *time.Time `json:"ended_at,omitempty"`
	// Round counts the archives of the conversation after its first: one
	// resumed and archived again is extracted again (round 1, 2, …), from
	// the messages after AfterSeq — ReadTo of the round before, the last
	// message it read.
	Round    int   `gorm:"not null;default:0" json:"round,omitempty"`
	AfterSeq int64 `gorm:"not null;default:0" json:"after_seq,omitempty"`
	ReadTo   int64 `gorm:"not null;default:0" json:"read_to,omitempty"`
	// Again: the conversation was archived again while this round ran
	// (it may have read none of what came after): its settle makes the
	// next round due instead of ending.
	Again bool `gorm:"not null;default:false" json:"again,omitempty"`
}

// TableName is the extractions' table.
func (Extraction) TableName() string { return "memory_extractions" }

// ExtractionEnd settles a claimed extraction: its state, error, and the
// notes and spend of a done one, stored with it in one transaction.
type ExtractionEnd struct {
	ConversationID string
	// Owner, Attempt and Round are the claim's: a settle of another
	// claim, or of an earlier round, stores nothing.
	Owner   string
	Attempt int
	Round   int
	State   string
	Error   string
	// ReadTo is the last message a done one read (Extraction.ReadTo).
	ReadTo int64
	// Notes are stored unless their user keeps Limit notes already (the
	// rest are dropped, counted in Extraction.Notes only as stored).
	Notes []Note
	Limit int
	// Usage is the model call's spend, tallied as the user's.
	Usage *Usage
	At    time.Time
	// RetryAt: a failed attempt that may be tried again goes back to due,
	// not before this time (State is ignored then).
	RetryAt *time.Time
}

// NoteUser is whose notes a turn of sessionKey, sent by userID, reads and
// writes (sessions.MemoryUser, which says why): the session key without
// its Telegram topic, and in a group chat its members share the sender's
// own key in it; "" when that sender is not known.
func NoteUser(sessionKey, userID string) string {
	user := UsageUser(sessionKey)
	if NoteMembers(sessionKey) != "" {
		if userID == "" {
			return ""
		}
		user += ":" + userID
	}
	if member, ok := strings.CutPrefix(user, "telegram:group:"); ok && telegramStandIns[member[strings.LastIndexByte(member, ':')+1:]] {
		return "" // nobody's own: every such message shares it
	}
	return user
}

// telegramStandIns are the users Telegram sends a group's messages from
// when they are sent on behalf of a chat — an anonymous admin's
// (GroupAnonymousBot), a channel's (Channel_Bot), a linked channel's post
// (Telegram) — shared by all who send so: no one's notes.
var telegramStandIns = map[string]bool{"1087968824": true, "136817688": true, "777000": true}

// NoteMembers is, for a group chat its members share (a Telegram group
// with group_scope chat: "telegram:group:CHAT"), how its members' note
// users begin ("telegram:group:CHAT:"); "" for a session key whose notes
// are one user's.
func NoteMembers(sessionKey string) string {
	user := UsageUser(sessionKey)
	if rest, ok := strings.CutPrefix(user, "telegram:group:"); ok && !strings.Contains(rest, ":") {
		return user + ":"
	}
	return ""
}

// NoteWords are the words of a text as a search of notes takes them:
// letters and digits, lower-cased. (SQLite's index folds them further,
// diacritics, the same way for a note and a query.)
func NoteWords(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// MaxSearchWords bounds the words of a search: a long message searches
// by its first ones.
const MaxSearchWords = 32

// SearchWords are the words of a query as every search of notes takes
// them — the databases' full-text searches and a turn's ranking of its
// user's cached notes: NoteWords less stop words, at most MaxSearchWords,
// each once. Nothing else of the query reaches a search's syntax.
func SearchWords(query string) []string {
	seen := map[string]bool{}
	var out []string
	for _, w := range NoteWords(query) {
		if seen[w] || stopWords[w] {
			continue
		}
		seen[w] = true
		out = append(out, w)
		if len(out) == MaxSearchWords {
			break
		}
	}
	return out
}

// IsStopWord reports whether a search leaves w out.
func IsStopWord(w string) bool { return stopWords[w] }

// stopWords are words a search leaves out: nearly every note and message
// holds them ("the user is…", "what is my…"), so a match on them says
// nothing, and a rank would count how often they occur.
var stopWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`a an and are as at be but by did do does for from had has have he her his how i if in is it its
		me my of on or our she so than that the their them they this to was we were what when where which who why will with would you your
		user user's users`) {
		stopWords[w] = true
	}
}

// NotesVersion names a state of one user's notes: two reads of them
// taken after the same version was read hold the same notes, so a copy
// kept with the version it was read after is good while the version
// stays. Local counts this process's writes of the user's notes; Changes,
// every change of them by any process, kept in the database where other
// processes write (PostgreSQL's replicas).
type NotesVersion struct {
	Local   uint64
	Changes int64
}
