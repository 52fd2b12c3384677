package sessions

// The Extractor: at a reset, what is worth keeping of the archived
// conversation becomes notes (session.memory.extract_on_reset). It is a
// service beside the Manager, as the Scheduler is: the wiring builds,
// starts and stops it. Each archived conversation is one row of
// memory_extractions (ledger.Extraction), recorded in the transaction
// that archives it (ExtractionUser), claimed by one statement for a lease,
// and settled in the transaction that stores its notes and tallies its
// spend. A run cut anywhere — a crash, a SIGKILL, a database blip —
// leaves the row claimable again and none of its notes stored; a run
// whose settle landed is never made again. No note is written twice.
//
// It runs off every turn's path: the archive only adds the row (and a
// local one wakes the Extractor), and its model call is made in the
// background, budgeted as the user's and tallied as
// theirs, as a summary is.

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// DefaultExtractionPrompt instructs the model call of an extraction.
const DefaultExtractionPrompt = `You keep notes about one user across conversations with an assistant. ` +
	`From the conversation given, write the facts about this user worth keeping for later conversations: ` +
	`their name, role, projects, preferences, and what they asked the assistant to do or never do again. ` +
	`Leave out what is already in the notes kept, what is only about this conversation, and anything about other people that is not about the user. ` +
	`Write one fact per line, in the third person, each under 200 characters, at most ` + "10" + ` lines. ` +
	`If nothing is worth keeping, answer NONE.`

// Bounds of an extraction.
const (
	extractLease   = 3 * time.Minute // longer than its model call may take
	extractTimeout = 2 * time.Minute
	extractRows    = 400 // the newest messages an extraction reads
	// extractTokens bounds the transcript an extraction sends, in
	// estimated tokens: the newest messages that fit. A long conversation
	// costs one bounded call.
	extractTokens = 8000
	// extractMinMessages: a conversation with fewer user messages is
	// not worth a model call.
	extractMinMessages = 2
	extractMaxNotes    = 10
	extractEvery       = 30 * time.Second // the look for due rows (a retry, a lapsed claim)
	// ExtractWorkers is how many extractions one replica runs at once:
	// a daily reset archives many conversations in the same minute, and
	// each extraction is a model call of seconds.
	ExtractWorkers = 4
)

// ExtractionStore is what the Extractor reads and writes of the store
// (store.DB's extractsql.go).
type ExtractionStore interface {
	ExtractAtArchive(user func(channel, sessionKey string) string)
	ClaimExtraction(ctx context.Context, owner string, alive []string, at, leaseUntil time.Time) (*ledger.Extraction, error)
	SettleExtraction(ctx context.Context, e ledger.ExtractionEnd) (int, error)
	Replicas(ctx context.Context, self string, ttl time.Duration) (gone []ledger.Replica, alive []string, err error)
	MessagesAfter(ctx context.Context, convID string, afterSeq int64, limit int) ([]ledger.Message, error)
	Notes(ctx context.Context, user string, limit int) ([]ledger.Note, error)
}

// extractHost is what the Extractor needs of the Manager: the policy and
// the agent in force, the user's standing against their budget and the
// tally of what a call spent.
type extractHost interface {
	Policy(channel string) Policy
	settings() *liveSettings
}

// Extractor writes archived conversations' notes. NewExtractor builds it.
type Extractor struct {
	store    ExtractionStore
	host     extractHost
	spend    compactSpend
	memory   *Memory
	obs      Observer
	tr       *tracing
	log      *slog.Logger
	now      func() time.Time
	after    func(time.Duration) <-chan time.Time
	replica  string
	leaseTTL time.Duration

	wakes  []chan struct{} // a worker's each (run)
	stop   chan struct{}
	done   sync.WaitGroup
	cancel context.CancelFunc
	once   sync.Once
}

// NewExtractor returns the Extractor of m's archives, registered as an
// archive listener of m's Routes; Start runs it.
func NewExtractor(m *Manager, st ExtractionStore) *Extractor {
	e := &Extractor{store: st, host: m, spend: m.standing, memory: m.memory, obs: m.opts.Observer, tr: m.tr, log: m.log, now: m.now, after: m.opts.After,
		replica: m.opts.ReplicaID, leaseTTL: m.opts.LeaseTTL,
		wakes: make([]chan struct{}, ExtractWorkers), stop: make(chan struct{})}
	for i := range e.wakes {
		e.wakes[i] = make(chan struct{}, 1)
	}
	st.ExtractAtArchive(ExtractionUser(m.Policy))
	m.routes.OnArchive(e.archived)
	return e
}

// ExtractionUser returns whose notes an archived conversation of a
// channel and session key writes, under policy ("" for none): its
// user's, when their memory extracts at reset. The store calls it in the
// transaction that archives a conversation (store.DB.ExtractAtArchive),
// so an archive that commits has its extraction recorded; the Extractor
// sets it with the gateway's live policy, the CLI with the file's.
func ExtractionUser(policy func(channel string) Policy) func(channel, key string) string {
	return func(channel, key string) string {
		user := MemoryUser(key, "")
		if user == "" {
			return "" // a chat its members share: no one user's notes to write
		}
		if s := policy(channel).Memory.For(user); !s.Enabled || !s.ExtractOnReset {
			return ""
		}
		return user
	}
}

// archived wakes the workers for the extraction a local archive
// recorded.
func (e *Extractor) archived(ev ResetEvent) {
	if ev.OldConversation == "" {
		return
	}
	e.wakeAll()
}

// wakeAll wakes every worker that waits.
func (e *Extractor) wakeAll() {
	for _, w := range e.wakes {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// Start runs the Extractor: ExtractWorkers workers run due extractions,
// each claimed by one of them.
func (e *Extractor) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	for i, w := range e.wakes {
		e.done.Add(1)
		go e.run(ctx, w, i == 0)
	}
}

// Stop ends the Extractor: a run under way is cut (its row is claimed
// again after its lease, by this replica's next start or another); the
// extractions recorded and not run yet wait in the store.
func (e *Extractor) Stop() {
	e.once.Do(func() {
		close(e.stop)
		if e.cancel != nil {
			e.cancel()
		}
	})
	e.done.Wait()
}

// run is a worker: it claims and runs due extractions until none is
// left, then waits for a wake — or, the looking worker, for its next
// look. A worker that found one wakes the others, so that a batch of
// them (a daily reset's, a retry's) is run ExtractWorkers at a time.
func (e *Extractor) run(ctx context.Context, wake chan struct{}, looks bool) {
	defer e.done.Done()
	for {
		for ctx.Err() == nil {
			ran, err := e.RunOne(ctx)
			if err != nil && ctx.Err() == nil {
				e.log.Warn("extraction pass failed", slog.String("error", err.Error()))
			}
			if !ran || err != nil {
				break
			}
			e.wakeAll()
		}
		var look <-chan time.Time
		if looks {
			look = e.after(extractEvery)
		}
		select {
		case <-e.stop:
			return
		case <-wake:
		case <-look:
		}
	}
}

// RunOne claims one due extraction and runs it; false when none was due.
func (e *Extractor) RunOne(ctx context.Context) (bool, error) {
	_, alive, err := e.store.Replicas(ctx, e.replica, e.leaseTTL)
	if err != nil {
		return false, err
	}
	now := e.now()
	x, err := e.store.ClaimExtraction(ctx, e.replica, alive, now, now.Add(extractLease))
	if err != nil || x == nil {
		return false, err
	}
	end := e.extract(ctx, *x)
	if ctx.Err() != nil {
		return true, context.Cause(ctx) // cut: claimed again after its lease
	}
	end.ConversationID, end.Owner, end.Attempt, end.Round, end.At = x.ConversationID, e.replica, x.Attempt, x.Round, e.now()
	stored, err := e.store.SettleExtraction(ctx, end)
	if err != nil {
		return true, err
	}
	state := end.State
	if end.RetryAt != nil {
		state = ledger.ExtractDue
	}
	e.obs.ExtractionEnded(state)
	if stored > 0 {
		e.obs.NotesWritten(ledger.NoteByReset, stored)
	}
	return true, nil
}

// extract makes the extraction's model call and returns how it ends.
func (e *Extractor) extract(ctx context.Context, x ledger.Extraction) ledger.ExtractionEnd {
	settings := e.memory.Settings(x.Channel, x.UserKey)
	if !settings.Enabled || !settings.ExtractOnReset {
		return ledger.ExtractionEnd{State: ledger.ExtractSkipped, Error: "memory or extract_on_reset is off"}
	}
	// A round after the first reads what came after the round before.
	msgs, err := e.store.MessagesAfter(ctx, x.ConversationID, x.AfterSeq, 0)
	if err != nil {
		return e.retry(x, fmt.Errorf("read the conversation: %w", err))
	}
	var readTo int64
	if len(msgs) > 0 {
		readTo = msgs[len(msgs)-1].Seq
	}
	if len(msgs) > extractRows {
		msgs = msgs[len(msgs)-extractRows:]
	}
	transcript := extractionTranscript(msgs)
	if transcript == "" {
		return ledger.ExtractionEnd{State: ledger.ExtractSkipped, Error: "no message to read"}
	}
	p := e.host.Policy(x.Channel)
	in := Inbound{Channel: x.Channel, SessionKey: x.SessionKey}
	if s := e.spend.overBudget(ctx, in, p); s != nil {
		return ledger.ExtractionEnd{State: ledger.ExtractRefused, Error: OverBudgetPrefix + s.Over()}
	}
	kept, err := e.store.Notes(ctx, x.UserKey, 50)
	if err != nil {
		return e.retry(x, fmt.Errorf("read the notes kept: %w", err))
	}
	live := e.host.settings()
	ag := live.compactor
	if ag == nil {
		ag = live.agent
	}
	cctx, cancel := context.WithTimeout(ctx, extractTimeout)
	defer cancel()
	cctx, endSpan := e.tr.startSpanCtx(cctx, "memory extraction")
	reply, err := ag.Reply(cctx, agent.Request{SessionKey: x.SessionKey, Instructions: DefaultExtractionPrompt,
		Input: extractionInput(kept, transcript), Unstreamed: true}, nil)
	endSpan(err)
	if err != nil {
		return e.retry(x, fmt.Errorf("model call: %w", err))
	}
	var text string
	if n := len(reply.Messages); n > 0 {
		text = reply.Messages[n-1].Content
	}
	end := ledger.ExtractionEnd{State: ledger.ExtractDone, Limit: settings.MaxNotes, ReadTo: readTo}
	for i, line := range extractedNotes(text, kept) {
		// Each note once, by its round and place: a settle made again
		// stores none twice.
		key := fmt.Sprintf("extract:%s:%d", x.ConversationID, i)
		if x.Round > 0 {
			key = fmt.Sprintf("extract:%s:r%d:%d", x.ConversationID, x.Round, i)
		}
		end.Notes = append(end.Notes, ledger.Note{UserKey: x.UserKey, Text: line, Author: ledger.NoteByReset, ConversationID: x.ConversationID,
			CallKey: key, CreatedAt: e.now()})
	}
	conv := &ledger.Conversation{SessionKey: x.SessionKey, Channel: x.Channel}
	spent := []ledger.Message{{PromptTokens: reply.Usage.PromptTokens, CompletionTkns: reply.Usage.CompletionTokens, Cost: reply.Cost}}
	model := reply.Model
	if model == "" {
		model = ag.Model()
	}
	end.Usage = e.spend.usageFor(conv, spent, model, e.now(), 0, reply.Usage.Estimated)
	return end
}

// retry is how an attempt that failed ends: due again after a pause, or
// failed for good after MaxExtractTries.
func (e *Extractor) retry(x ledger.Extraction, err error) ledger.ExtractionEnd {
	e.log.Warn("extraction failed", slog.String("conversation", x.ConversationID), slog.Int("attempt", x.Attempt), slog.String("error", err.Error()))
	if x.Attempt >= ledger.MaxExtractTries {
		return ledger.ExtractionEnd{State: ledger.ExtractFailed, Error: err.Error()}
	}
	at := e.now().Add(time.Duration(x.Attempt) * time.Minute)
	return ledger.ExtractionEnd{Error: err.Error(), RetryAt: &at}
}

// extractionTranscript is the conversation as the extraction reads it:
// the user's and the assistant's messages, one per paragraph, the newest
// that fit extractTokens; "" for one with fewer than extractMinMessages
// of the user's.
func extractionTranscript(msgs []ledger.Message) string {
	var keep []ledger.Message
	users, tokens := 0, 0
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if m.Status != ledger.MsgOK || strings.TrimSpace(m.Content) == "" || len(m.ToolCalls) > 0 ||
			(m.Role != agent.RoleUser && m.Role != agent.RoleAssistant) {
			continue
		}
		if tokens += agent.EstimateTokens(len(m.Content)); tokens > extractTokens {
			break
		}
		if m.Role == agent.RoleUser {
			users++
		}
		keep = append(keep, m)
	}
	if users < extractMinMessages {
		return ""
	}
	slices.Reverse(keep)
	var b strings.Builder
	for _, m := range keep {
		switch m.Role {
		case agent.RoleUser:
			b.WriteString("User: ")
		case agent.RoleAssistant:
			b.WriteString("Assistant: ")
		default:
			continue
		}
		b.WriteString(m.Content)
		b.WriteString("\n\n")
	}
	return strings.TrimSpace(b.String())
}

// extractionInput is what the extraction's model call is asked: the
// notes kept, then the conversation.
func extractionInput(kept []ledger.Note, transcript string) string {
	var b strings.Builder
	b.WriteString("Notes kept:\n")
	if len(kept) == 0 {
		b.WriteString("(none)\n")
	}
	for _, n := range kept {
		b.WriteString("- " + n.Text + "\n")
	}
	b.WriteString("\nConversation:\n\n")
	b.WriteString(transcript)
	return b.String()
}

// extractedNotes are the notes of an extraction's answer: a line each
// (bullets and numbering taken off), valid as notes, not kept already,
// at most extractMaxNotes. "NONE" is none.
func extractedNotes(answer string, kept []ledger.Note) []string {
	have := map[string]bool{}
	for _, n := range kept {
		have[strings.ToLower(n.Text)] = true
	}
	var out []string
	for _, line := range strings.Split(answer, "\n") {
		line = strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(line), "-*•0123456789.) "))
		if line == "" || strings.EqualFold(strings.Trim(line, ".!"), "none") {
			continue
		}
		text, err := keptNoteText(line)
		if err != nil || have[strings.ToLower(text)] {
			continue
		}
		have[strings.ToLower(text)] = true
		out = append(out, text)
		if len(out) == extractMaxNotes {
			break
		}
	}
	return out
}
