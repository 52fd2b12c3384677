package sessions_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/faults"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// The fault-at-every-step harness's scenario for an extraction at reset
// (reset-extraction in TestFaultAtEveryStep): a user's conversation of
// two turns, stored without faults, is reset (/new), and the Extractor
// runs its extraction — the archive with the extraction's record, the
// claim, the transcript and the notes read, the user's standing, the
// settle with its notes and tally. That runs once without faults, which
// counts its ledger calls (N); then once for every k in 1..N with an
// outage from the k-th call, before it reaches the database and again
// after it landed with its answer lost, healed once it has failed a few
// calls. The user sends /new again until it is answered; the Extractor
// keeps looking, the clock moving on a minute a look (a lapsed claim's
// lease, a retry's pause). Every run must end, with no restart, in:
//
//   - the conversation archived, with one extraction, done;
//   - its two notes kept, each once;
//   - the extraction's spend tallied once.
func runExtractionFaults(t *testing.T, open func() *store.DB, k int, mode faults.Mode) faultRun {
	t.Helper()
	label := fmt.Sprintf("outage from step %d (%s)", k, mode)
	db := open()
	defer db.Close()
	if db.Driver() == store.DriverPostgres {
		if err := db.Gorm().Exec("TRUNCATE memory_extractions, notes, usage_days").Error; err != nil {
			t.Fatal(err)
		}
	}
	log, dump := runLog(t, label)
	defer dump()
	c := clocktest.New(time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC))
	ag := &factsAgent{}
	memory := sessions.MemoryPolicy{Default: sessions.MemorySettings{Enabled: true, InjectTokens: 400, MaxNotes: 50, ExtractOnReset: true}}
	m := sessions.New(db, ag, sessions.Options{Events: db.Events(), Now: c.Now, Logger: log,
		Policies:    map[string]sessions.Policy{"telegram": {MaxHistory: 20, Reset: sessions.ResetPolicy{Mode: sessions.ResetNone}, Memory: memory}},
		RescueEvery: 20 * time.Millisecond, RetryPause: 10 * time.Millisecond})
	defer m.Shutdown(context.Background())
	x := sessions.NewExtractor(m, db) // driven by RunOne, look by look
	key := sessions.TelegramDMKey(7)
	user := sessions.MemoryUser(key, "7")
	ctx := context.Background()
	var conv string
	for i, text := range []string{"I am Ann", "I keep bees in Graz"} {
		tk, err := m.Submit(ctx, sessions.Inbound{Channel: "telegram", SessionKey: key, UserID: "7", ChatID: "7",
			ClientMsgID: fmt.Sprint("m", i), Text: text}, sessions.Hooks{})
		if err != nil {
			t.Fatal(err)
		}
		out, err := tk.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conv = out.ConversationID
	}

	fs := faults.New(db)
	if k > 0 {
		fs.Outage(k, mode)
	}
	healed := healAfter(fs, k)
	aside := faults.Aside(ctx)
	extraction := func() *ledger.Extraction {
		e, err := db.Extraction(aside, conv)
		if err != nil {
			return nil
		}
		return e
	}
	reset := false
	for i := 0; ; i++ {
		if i == 30 {
			t.Errorf("%s: the extraction is not settled after 30 looks (30 min): %+v", label, extraction())
			break
		}
		if !reset {
			// /new, sent again until it is answered: a reset whose
			// archive landed and whose answer was lost archives the new,
			// empty conversation the second time.
			_, err := m.Reset(ctx, sessions.Inbound{Channel: "telegram", SessionKey: key, UserID: "7", ChatID: "7"})
			reset = err == nil
		}
		for {
			ran, err := x.RunOne(ctx)
			if !ran || err != nil {
				break
			}
		}
		if e := extraction(); reset && e != nil && e.State != ledger.ExtractDue && e.State != ledger.ExtractRunning {
			break
		}
		<-healedOrNow(healed, i)
		c.Advance(time.Minute)
	}
	struck := ""
	if steps := fs.Steps(); k > 0 && len(steps) >= k {
		struck = steps[k-1]
	}
	if c, err := db.Conversation(aside, conv); err != nil || c == nil || c.Status != ledger.StatusArchived {
		t.Errorf("%s: the conversation is %+v (%v), want archived", label, c, err)
	}
	if e := extraction(); e == nil || e.State != ledger.ExtractDone || e.Notes != 2 {
		t.Errorf("%s: the extraction ended %+v, want done with 2 notes", label, e)
	}
	notes, err := db.Notes(aside, user, 100)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, n := range notes {
		texts = append(texts, n.Text)
	}
	slices.Sort(texts)
	if want := []string{"Ann keeps bees.", "Ann lives in Graz."}; !slices.Equal(texts, want) {
		t.Errorf("%s: notes %q, want %q, each once (%d model calls)", label, texts, want, ag.extractions.Load())
	}
	var tally []ledger.UsageDay
	if err := db.Gorm().Where("user_key = ? AND model = ?", user, factsModel).Find(&tally).Error; err != nil {
		t.Fatal(err)
	}
	if len(tally) != 1 || tally[0].PromptTokens != factsUsage.PromptTokens || tally[0].CompletionTokens != factsUsage.CompletionTokens {
		t.Errorf("%s: the extraction's tally %+v, want one call's %d prompt tokens", label, tally, factsUsage.PromptTokens)
	}
	return faultRun{calls: fs.Calls(), steps: fs.Steps(), struck: struck}
}

// factsAgent echoes turns and answers an extraction with two notes,
// spending factsUsage on model factsModel.
type factsAgent struct {
	agent.Echo
	extractions atomic.Int32
}

const factsModel = "extractor"

var factsUsage = agent.Usage{PromptTokens: 40, CompletionTokens: 10, TotalTokens: 50}

func (a *factsAgent) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	if req.Instructions != sessions.DefaultExtractionPrompt {
		return a.Echo.Reply(ctx, req, onDelta)
	}
	a.extractions.Add(1)
	return agent.Reply{Messages: []agent.Message{{Role: agent.RoleAssistant, Content: "- Ann keeps bees.\n- Ann lives in Graz."}},
		Usage: factsUsage, Model: factsModel}, nil
}
