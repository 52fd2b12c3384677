package sessions

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// extractAgent echoes turns; an extraction's call (DefaultExtractionPrompt)
// tells started, waits for release (when set) and answers answer.
type extractAgent struct {
	answer  string
	started chan string // the extraction's input
	release chan struct{}
	usage   agent.Usage
	// turnUsage is what each turn's reply reports spent.
	turnUsage agent.Usage

	mu    sync.Mutex
	turns []agent.Request
	calls int
}

func (a *extractAgent) Name() string  { return "extract" }
func (a *extractAgent) Model() string { return "m" }
func (a *extractAgent) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	if req.Instructions != DefaultExtractionPrompt {
		a.mu.Lock()
		a.turns = append(a.turns, req)
		a.mu.Unlock()
		r, err := agent.Echo{}.Reply(ctx, req, onDelta)
		if a.turnUsage.TotalTokens > 0 {
			r.Usage = a.turnUsage
		}
		return r, err
	}
	a.mu.Lock()
	a.calls++
	a.mu.Unlock()
	if a.started != nil {
		a.started <- req.Input
	}
	if a.release != nil {
		select {
		case <-a.release:
		case <-ctx.Done():
			return agent.Reply{}, ctx.Err()
		}
	}
	return agent.Reply{Messages: []agent.Message{{Role: agent.RoleAssistant, Content: a.answer}}, Usage: a.usage, Model: "m"}, nil
}

func (a *extractAgent) extractions() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls
}

func (a *extractAgent) lastTurn() agent.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.turns[len(a.turns)-1]
}

func extractPolicies(budget Budget) map[string]Policy {
	p := Policy{MaxHistory: 10, Reset: ResetPolicy{Mode: ResetIdle, IdleFor: time.Hour}, Budget: BudgetPolicy{Default: budget},
		Memory: MemoryPolicy{Default: MemorySettings{Enabled: true, InjectTokens: 400, MaxNotes: 50, ExtractOnReset: true}}}
	return map[string]Policy{"websocket": p}
}

// extracting is a manager of db on ag whose archives extract (the
// policies of extractPolicies, the clock at t0), with its Extractor
// running; each extraction's end is told on ended.states. Both stop when
// the test ends.
func extracting(t *testing.T, db *store.DB, ag *extractAgent) (*Manager, *extractionsEnded) {
	t.Helper()
	ended := &extractionsEnded{states: make(chan string, 2*ExtractWorkers)}
	m := New(db, ag, Options{Policies: extractPolicies(Budget{}), Now: newClock(t0).Now, Logger: quiet, Events: events(db), Observer: ended})
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	x := NewExtractor(m, db)
	x.Start()
	t.Cleanup(x.Stop)
	return m, ended
}

// talkAndReset sends key's user's two messages, then resets the key (an
// archive, with its extraction recorded); it returns the first's outcome.
func talkAndReset(t *testing.T, m *Manager, key, a, b string) Outcome {
	t.Helper()
	out := handle(t, m, msg(key, a))
	handle(t, m, msg(key, b))
	if _, err := m.Reset(context.Background(), msg(key, "")); err != nil {
		t.Fatal(err)
	}
	return out
}

func noteTexts(t *testing.T, db *store.DB, user string) []string {
	t.Helper()
	notes, err := db.Notes(context.Background(), user, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range notes {
		out = append(out, n.Text)
	}
	return out
}

// At a reset the archived conversation's notes are extracted in the
// background: the new conversation's first reply does not wait for it,
// the notes reach the next turn as memory, and the call's spend is the
// user's.
func TestExtractionAtResetRunsOffThePath(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		ag := &extractAgent{answer: "- The user's name is Ann.\n- Ann grows tomatoes.\nNONE", started: make(chan string, 1), release: make(chan struct{}),
			usage: agent.Usage{PromptTokens: 40, CompletionTokens: 10, TotalTokens: 50}}
		m, ended := extracting(t, db, ag)
		key := "websocket:ann"
		talkAndReset(t, m, key, "hi, I am Ann", "and I grow tomatoes")
		input := <-ag.started // the extraction's call is made, and held
		if !strings.Contains(input, "I grow tomatoes") {
			t.Fatalf("the extraction read %q", input)
		}
		out := handle(t, m, msg(key, "hello again"))
		if out.Reply.Text == "" {
			t.Fatal("the first reply of the new conversation waited for the extraction")
		}
		close(ag.release)
		if state := <-ended.states; state != ledger.ExtractDone {
			t.Fatalf("the extraction ended %s", state)
		}
		notes := noteTexts(t, db, MemoryUser(key, "ann"))
		if len(notes) != 2 || !strings.Contains(strings.Join(notes, "|"), "grows tomatoes") {
			t.Fatalf("notes = %q", notes)
		}
		handle(t, m, msg(key, "what do I grow?"))
		if mem := ag.lastTurn().MemoryText(); !strings.Contains(mem, "tomatoes") {
			t.Fatalf("the next turn's memory = %q", mem)
		}
		day, _, err := db.UserUsage(context.Background(), key, t0.Format(time.DateOnly), t0.Format("2006-01")+"-01")
		if err != nil || day.PromptTokens < 40 {
			t.Fatalf("the user's tally = %+v, %v: the extraction's 40 prompt tokens missing", day, err)
		}
	})
}

// An extraction cut in the middle (a crash: its claim never settles) is
// run again by the next replica, and its notes are stored once — even
// when the cut run's model call answers after all and tries to settle.
func TestExtractionCutIsRunAgainAndStoredOnce(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(t0)
		slow := &extractAgent{answer: "- Ann grows tomatoes.", started: make(chan string, 1), release: make(chan struct{})}
		a := newManager(t, db, slow, c, extractPolicies(Budget{}))
		xa := NewExtractor(a, db)
		key := "websocket:ann"
		handle(t, a, msg(key, "I am Ann"))
		handle(t, a, msg(key, "I grow tomatoes"))
		if _, err := a.Reset(context.Background(), msg(key, "")); err != nil {
			t.Fatal(err)
		}
		ev := archivedExtraction(t, db, key)
		// A claims it and is cut off in its model call.
		var aErr error
		aDone := make(chan struct{})
		go func() {
			defer close(aDone)
			_, aErr = xa.RunOne(context.Background())
		}()
		<-slow.started
		// A's lease runs out (a killed replica's heartbeat stops too):
		// B, another replica, claims it, runs it and settles.
		c.Advance(extractLease + time.Second)
		fast := &extractAgent{answer: "- Ann grows tomatoes.\n- Ann lives in Graz."}
		b := New(db, fast, Options{Policies: extractPolicies(Budget{}), Now: c.Now, Logger: quiet, ReplicaID: "replica-b"})
		defer b.Shutdown(context.Background())
		xb := NewExtractor(b, db)
		if ran, err := xb.RunOne(context.Background()); !ran || err != nil {
			t.Fatalf("B's run = %v, %v", ran, err)
		}
		// A's call answers now: its settle finds its claim lost.
		close(slow.release)
		<-aDone
		if !errors.Is(aErr, store.ErrExtractionLost) {
			t.Fatalf("A's late settle = %v, want ErrExtractionLost", aErr)
		}
		notes := noteTexts(t, db, MemoryUser(key, ""))
		if len(notes) != 2 {
			t.Fatalf("notes = %q, want B's two, once", notes)
		}
		if ran, err := xb.RunOne(context.Background()); ran || err != nil {
			t.Fatalf("a settled extraction claimed again: %v, %v", ran, err)
		}
		x, err := db.Extraction(context.Background(), ev.ConversationID)
		if err != nil || x.State != ledger.ExtractDone || x.Notes != 2 || x.Attempt != 2 {
			t.Fatalf("the extraction = %+v, %v", x, err)
		}
	})
}

// A settle whose commit landed and whose answer was lost, made again,
// stores nothing twice.
func TestExtractionSettleMadeAgain(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		ctx := context.Background()
		if err := db.AddExtraction(ctx, ledger.Extraction{ConversationID: "c1", SessionKey: "websocket:ann", Channel: "websocket", UserKey: "websocket:ann", CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
		x, err := db.ClaimExtraction(ctx, "r1", []string{"r1"}, t0, t0.Add(time.Minute))
		if err != nil || x == nil {
			t.Fatalf("claim = %+v, %v", x, err)
		}
		if again, err := db.ClaimExtraction(ctx, "r2", []string{"r1", "r2"}, t0, t0.Add(time.Minute)); again != nil || err != nil {
			t.Fatalf("a held extraction claimed again: %+v, %v", again, err)
		}
		end := ledger.ExtractionEnd{ConversationID: "c1", Owner: "r1", Attempt: x.Attempt, State: ledger.ExtractDone, At: t0,
			Notes: []ledger.Note{{UserKey: "websocket:ann", Text: "one", Author: ledger.NoteByReset, CallKey: "extract:c1:0", CreatedAt: t0},
				{UserKey: "websocket:ann", Text: "two", Author: ledger.NoteByReset, CallKey: "extract:c1:1", CreatedAt: t0}}}
		for range 2 {
			if n, err := db.SettleExtraction(ctx, end); n != 2 || err != nil {
				t.Fatalf("settle = %d, %v", n, err)
			}
		}
		if notes := noteTexts(t, db, "websocket:ann"); len(notes) != 2 {
			t.Fatalf("notes = %q", notes)
		}
		// The claim lapsed to r2 meanwhile: r1's settle stores nothing.
		_ = db.AddExtraction(ctx, ledger.Extraction{ConversationID: "c2", SessionKey: "websocket:ann", Channel: "websocket", UserKey: "websocket:ann", CreatedAt: t0})
		x1, _ := db.ClaimExtraction(ctx, "r1", []string{"r1"}, t0, t0.Add(time.Minute))
		x2, _ := db.ClaimExtraction(ctx, "r2", []string{"r2"}, t0.Add(2*time.Minute), t0.Add(3*time.Minute))
		if x1 == nil || x2 == nil || x2.Attempt != 2 {
			t.Fatalf("claims = %+v, %+v", x1, x2)
		}
		lost := ledger.ExtractionEnd{ConversationID: "c2", Owner: "r1", Attempt: x1.Attempt, State: ledger.ExtractDone, At: t0,
			Notes: []ledger.Note{{UserKey: "websocket:ann", Text: "three", Author: ledger.NoteByReset, CallKey: "extract:c2:0", CreatedAt: t0}}}
		if _, err := db.SettleExtraction(ctx, lost); !errors.Is(err, store.ErrExtractionLost) {
			t.Fatalf("a lapsed claim's settle = %v", err)
		}
		if notes := noteTexts(t, db, "websocket:ann"); len(notes) != 2 {
			t.Fatalf("notes after a lost settle = %q", notes)
		}
	})
}

// Over their budget, a user's extraction is refused: no model call. A
// conversation of one message is not worth one either.
func TestExtractionOverBudgetIsRefused(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(t0)
		ag := &extractAgent{answer: "- x", turnUsage: agent.Usage{PromptTokens: 30, CompletionTokens: 5, TotalTokens: 35}}
		m := newManager(t, db, ag, c, extractPolicies(Budget{TokensPerDay: 20}))
		x := NewExtractor(m, db)
		key := "websocket:ann"
		talkAndReset(t, m, key, "a long enough message to spend more than one token", "and another one")
		ev := archivedExtraction(t, db, key)
		if ran, err := x.RunOne(context.Background()); !ran || err != nil {
			t.Fatalf("run = %v, %v", ran, err)
		}
		got, err := db.Extraction(context.Background(), ev.ConversationID)
		if err != nil || got.State != ledger.ExtractRefused || ag.extractions() != 0 {
			t.Fatalf("extraction = %+v, %v; model calls %d", got, err, ag.extractions())
		}
		m2 := newManager(t, db, ag, c, extractPolicies(Budget{}))
		x2 := NewExtractor(m2, db)
		handle(t, m2, msg("websocket:bo", "just one line"))
		if _, err := m2.Reset(context.Background(), msg("websocket:bo", "")); err != nil {
			t.Fatal(err)
		}
		conv, err := db.LastArchived(context.Background(), "websocket:bo")
		if err != nil || conv == nil {
			t.Fatalf("bo's archived conversation: %+v, %v", conv, err)
		}
		if x, err := db.Extraction(context.Background(), conv.ID); err != nil || x != nil {
			t.Fatalf("a one-line conversation's extraction = %+v, %v", x, err)
		}
		if ran, err := x2.RunOne(context.Background()); ran || err != nil || ag.extractions() != 0 {
			t.Fatalf("run = %v, %v; model calls %d", ran, err, ag.extractions())
		}
	})
}

// On PostgreSQL a claim made while another holds the row's lock (its
// claim in flight) skips the row instead of waiting for it: it takes
// nothing, at once, and the extraction is claimed once.
func TestExtractionClaimSkipsALockedRow(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		if db.Driver() != store.DriverPostgres {
			t.Skip("SQLite has one writer: no claim meets another's row lock")
		}
		ctx := context.Background()
		if err := db.AddExtraction(ctx, ledger.Extraction{ConversationID: "c-lock", SessionKey: "websocket:ann", Channel: "websocket", UserKey: "websocket:ann", CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
		// A holds the row's lock; B claims meanwhile.
		tx := db.Gorm().Begin()
		defer tx.Rollback()
		if err := tx.Exec("SELECT 1 FROM memory_extractions WHERE conversation_id = 'c-lock' FOR UPDATE").Error; err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if x, err := db.ClaimExtraction(cctx, "B", []string{"A", "B"}, t0, t0.Add(time.Minute)); err != nil || x != nil {
			t.Fatalf("B's claim while A holds the row = %+v, %v; want none, at once", x, err)
		}
		if err := tx.Exec("UPDATE memory_extractions SET state = 'running', owner = 'A', attempt = 1, lease_until = ? WHERE conversation_id = 'c-lock'", t0.Add(time.Minute)).Error; err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit().Error; err != nil {
			t.Fatal(err)
		}
		if x, err := db.ClaimExtraction(ctx, "B", []string{"A", "B"}, t0, t0.Add(time.Minute)); err != nil || x != nil {
			t.Fatalf("B's claim after A's = %+v, %v; want none", x, err)
		}
	})
}

// archivedExtraction is the extraction recorded with the archive of
// key's last conversation, due.
func archivedExtraction(t *testing.T, db *store.DB, key string) *ledger.Extraction {
	t.Helper()
	ctx := context.Background()
	conv, err := db.LastArchived(ctx, key)
	if err != nil || conv == nil {
		t.Fatalf("the archived conversation of %s: %+v, %v", key, conv, err)
	}
	x, err := db.Extraction(ctx, conv.ID)
	if err != nil || x == nil || x.State != ledger.ExtractDue {
		t.Fatalf("the archive of %s recorded no extraction: %+v, %v", conv.ID, x, err)
	}
	return x
}

// extractionsEnded is an Observer telling how extractions end.
type extractionsEnded struct {
	noObserver
	states chan string
}

func (o *extractionsEnded) ExtractionEnded(state string) { o.states <- state }

// Every way a conversation is archived records its extraction in the
// archive's own transaction — a reset on arrival, /new, the sweep, a
// resume of the previous conversation, the CLI's reset — so that no
// archive that committed goes without one, whatever happens to the
// process after: here no Extractor runs, and a new one, as after a
// restart, finds every row due. A conversation too short to extract from
// is passed over, and so is a user whose memory does not extract.
func TestEveryArchiveRecordsItsExtraction(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(t0)
		ctx := context.Background()
		pol := extractPolicies(Budget{})
		p := pol["websocket"]
		p.Memory.Users = map[string]MemorySettings{"websocket:off": {Enabled: true, InjectTokens: 400}}
		pol["websocket"] = p
		m := newManager(t, db, agent.Echo{}, c, pol)
		NewExtractor(m, db) // sets what archives record; never started
		talk := func(key string) string {
			handle(t, m, msg(key, "first"))
			return handle(t, m, msg(key, "second")).ConversationID
		}
		recorded := func(how, conv string, want bool) {
			t.Helper()
			x, err := db.Extraction(ctx, conv)
			if err != nil {
				t.Fatal(err)
			}
			if got := x != nil && x.State == ledger.ExtractDue; got != want {
				t.Fatalf("%s: the extraction of %s = %+v, want recorded %v", how, conv, x, want)
			}
		}
		// /new.
		conv := talk("websocket:new")
		if _, err := m.Reset(ctx, msg("websocket:new", "")); err != nil {
			t.Fatal(err)
		}
		recorded("/new", conv, true)
		// A resume archives the conversation it leaves.
		left := talk("websocket:new")
		if _, err := m.Conversations().ResumePrevious(ctx, msg("websocket:new", "")); err != nil {
			t.Fatal(err)
		}
		recorded("a resume", left, true)
		// The CLI's reset.
		conv = talk("websocket:cli")
		if _, err := db.ResetKey(ctx, "websocket:cli", c.Now()); err != nil {
			t.Fatal(err)
		}
		recorded("the CLI's reset", conv, true)
		// Idle: on arrival, and by the sweep; a user whose memory does
		// not extract, and a conversation of one message, are passed over.
		arrival, swept, off := talk("websocket:arrival"), talk("websocket:swept"), talk("websocket:off")
		short := handle(t, m, msg("websocket:short", "only")).ConversationID
		c.Advance(2 * time.Hour)
		handle(t, m, msg("websocket:arrival", "back"))
		recorded("a reset on arrival", arrival, true)
		// (Four: the resumed conversation of websocket:new too.)
		if n, err := NewSweeper(m, nil).SweepIdle(ctx); err != nil || n != 4 {
			t.Fatalf("sweep = %d, %v; want 4 archived", n, err)
		}
		recorded("the sweep", swept, true)
		recorded("the sweep, memory not extracting", off, false)
		recorded("the sweep, one message", short, false)
		// After a restart: a new Extractor runs them all.
		ag := &extractAgent{answer: "- A fact."}
		m2 := newManager(t, db, ag, c, pol)
		x := NewExtractor(m2, db)
		ran := 0
		for {
			ok, err := x.RunOne(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			ran++
		}
		// Five: the conversation /new archived, resumed and swept is
		// extracted once.
		if ran != 5 || ag.extractions() != 5 {
			t.Fatalf("after a restart %d extractions ran, %d model calls; want 5", ran, ag.extractions())
		}
	})
}

// A conversation resumed after its extraction and archived again is
// extracted again, from what came after the first round: the notes of
// both rounds are kept, each once, and the second round does not read
// the first one's messages again.
func TestAResumedConversationIsExtractedAgainAtItsNextArchive(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		ag := &extractAgent{answer: "- The user's name is Ann.", started: make(chan string, 2)}
		m, ended := extracting(t, db, ag)
		key := "websocket:ann"
		first := talkAndReset(t, m, key, "hi, I am Ann", "nice to meet you")
		if input := waitFor(t, ag.started, "round 0's call"); !strings.Contains(input, "I am Ann") {
			t.Fatalf("round 0 read %q", input)
		}
		if state := waitFor(t, ended.states, "round 0's end"); state != ledger.ExtractDone {
			t.Fatalf("round 0 ended %s", state)
		}
		// Back to the archived conversation, two more messages, and a
		// reset again.
		if _, err := m.Conversations().ResumePrevious(context.Background(), msg(key, "")); err != nil {
			t.Fatal(err)
		}
		ag.answer = "- Ann keeps bees."
		talkAndReset(t, m, key, "I keep bees", "three hives")
		input := waitFor(t, ag.started, "round 1's call")
		if !strings.Contains(input, "I keep bees") || strings.Contains(input, "I am Ann") {
			t.Fatalf("round 1 read %q, want the messages after round 0 only", input)
		}
		if state := waitFor(t, ended.states, "round 1's end"); state != ledger.ExtractDone {
			t.Fatalf("round 1 ended %s", state)
		}
		notes := noteTexts(t, db, MemoryUser(key, "ann"))
		if strings.Join(notes, "|") != "Ann keeps bees.|The user's name is Ann." && strings.Join(notes, "|") != "The user's name is Ann.|Ann keeps bees." {
			t.Fatalf("notes = %q, want one of each round", notes)
		}
		row, err := db.Extraction(context.Background(), first.ConversationID)
		if err != nil || row == nil || row.Round != 1 || row.AfterSeq == 0 || row.ReadTo <= row.AfterSeq || row.State != ledger.ExtractDone {
			t.Fatalf("extraction row = %+v, %v", row, err)
		}
	})
}

// Extractions run ExtractWorkers at a time on a replica: a reset of many
// users at once (a daily sweep) does not extract them one after another.
func TestExtractionsRunSeveralAtATime(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		for range 3 { // the workers claim at once: a collision is a matter of timing
			extractionsRunSeveralAtATime(t, open())
		}
	})
}

func extractionsRunSeveralAtATime(t *testing.T, db *store.DB) {
	c := newClock(t0)
	ag := &extractAgent{answer: "NONE", started: make(chan string, ExtractWorkers+1), release: make(chan struct{})}
	ended := &extractionsEnded{states: make(chan string, ExtractWorkers+1)}
	m := New(db, ag, Options{Policies: extractPolicies(Budget{}), Now: c.Now, Logger: quiet, Events: events(db), Observer: ended})
	defer m.Shutdown(context.Background())
	x := NewExtractor(m, db)
	for i := range ExtractWorkers + 1 {
		key := fmt.Sprintf("websocket:u%d", i)
		talkAndReset(t, m, key, "hi", "hello")
	}
	x.Start()
	defer x.Stop()
	// ExtractWorkers calls are made while none has answered; the one
	// more waits for a worker.
	for i := range ExtractWorkers {
		waitFor(t, ag.started, fmt.Sprintf("extraction %d of %d at once", i+1, ExtractWorkers))
	}
	select {
	case <-ag.started:
		t.Fatalf("more than %d extractions ran at once", ExtractWorkers)
	default:
	}
	close(ag.release)
	for i := range ExtractWorkers + 1 {
		if state := waitFor(t, ended.states, fmt.Sprintf("the end of extraction %d", i+1)); state != ledger.ExtractDone {
			t.Fatalf("an extraction ended %s", state)
		}
	}
}

// A conversation resumed and archived again while its extraction runs
// has its next round run after it, on what came after: nothing of the
// second archive is left unread.
func TestAConversationArchivedAgainWhileItsExtractionRunsIsExtractedAgain(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		ag := &extractAgent{answer: "- The user's name is Ann.", started: make(chan string, 2), release: make(chan struct{})}
		m, ended := extracting(t, db, ag)
		key := "websocket:ann"
		first := talkAndReset(t, m, key, "hi, I am Ann", "nice to meet you")
		waitFor(t, ag.started, "round 0's call") // held
		if _, err := m.Conversations().ResumePrevious(context.Background(), msg(key, "")); err != nil {
			t.Fatal(err)
		}
		talkAndReset(t, m, key, "I keep bees", "three hives")
		close(ag.release)
		waitFor(t, ended.states, "round 0's end")
		if input := waitFor(t, ag.started, "round 1's call"); !strings.Contains(input, "I keep bees") || strings.Contains(input, "I am Ann") {
			t.Fatalf("round 1 read %q, want what came after round 0 only", input)
		}
		if state := waitFor(t, ended.states, "round 1's end"); state != ledger.ExtractDone {
			t.Fatalf("round 1 ended %s", state)
		}
		row, err := db.Extraction(context.Background(), first.ConversationID)
		if err != nil || row == nil || row.Round != 1 || row.Again || row.State != ledger.ExtractDone {
			t.Fatalf("extraction row = %+v, %v", row, err)
		}
	})
}
