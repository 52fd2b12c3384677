package gateway

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent/openai"
	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

var wsModels = []sessions.Model{
	{Name: "Fast", ID: "fast-1", ContextTokens: 1000, PricePer1KPrompt: 1, PricePer1KCompletion: 2},
	{Name: "Smart", ID: "smart-1", ContextTokens: 8000, PricePer1KPrompt: 10, PricePer1KCompletion: 30},
}

// modelEnv is a gateway whose openai backend talks to a model server that
// records each request's model, with agent.models and a fake clock.
func modelEnv(t *testing.T, models []sessions.Model, policy sessions.Policy, clock *clocktest.Clock) (*env, *llmtest.Server) {
	t.Helper()
	llm, ag := llmtest.AgentWith(t, openai.Config{PricePer1KPrompt: 1, PricePer1KCompletion: 1})
	db, err := store.Open(context.Background(), store.DriverSQLite, filepath.Join(t.TempDir(), "g.db"), store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mgr := sessions.New(db, ag, sessions.Options{Logger: quiet, Now: clock.Now, Models: models, ContextTokens: 500,
		Policies: map[string]sessions.Policy{Channel: policy}})
	return serveEnv(t, db, mgr, WSOptions{Now: clock.Now, RatePerSecond: 1000, RateBurst: 1000}, false), llm
}

// lastModelAsked is the model of the model server's newest request.
func lastModelAsked(t *testing.T, llm *llmtest.Server) string {
	t.Helper()
	reqs := llm.Received()
	if len(reqs) == 0 {
		t.Fatal("no request reached the model")
	}
	return reqs[len(reqs)-1].Model
}

func TestModelAndStatusFrames(t *testing.T) {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	clock := clocktest.New(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)) // 14:00 in Berlin
	e, llm := modelEnv(t, wsModels, sessions.Policy{MaxHistory: 100,
		Reset:  sessions.ResetPolicy{Mode: sessions.ResetDaily, AtHour: 4, Location: berlin},
		Budget: sessions.BudgetPolicy{Default: sessions.Budget{TokensPerDay: 1000, CostPerMonth: 2}}}, clock)
	c, ready := e.connect(map[string]any{"user": "ann"})
	if ready["models"] != true {
		t.Fatalf("ready = %v, want models: true", ready)
	}
	other, _ := e.connect(map[string]any{"user": "ann"})

	c.send(map[string]any{"type": "message", "id": "c-1", "text": "hi"})
	c.expect("reply")
	if got := lastModelAsked(t, llm); got != "m" {
		t.Fatalf("before a choice the request asks for %q", got)
	}
	c.send(map[string]any{"type": "model"})
	f := c.expect("model")
	if names := modelNames(f); names != "Fast:fast-1:1000 Smart:smart-1:8000" {
		t.Fatalf("models = %s (%v)", names, f)
	}
	if cur := f["current"].(map[string]any); cur["name"] != "" || cur["id"] != "m" || num(cur["context_tokens"]) != 500 || f["chosen"] != "" {
		t.Fatalf("model frame before a choice = %v", f)
	}

	// A choice, then a message at once: the message is answered with the
	// model chosen; the session's other connection hears of the choice.
	c.send(map[string]any{"type": "model", "name": "smart"})
	c.send(map[string]any{"type": "message", "id": "c-2", "text": "hello"})
	f = c.expect("model")
	if cur := f["current"].(map[string]any); cur["name"] != "Smart" || cur["id"] != "smart-1" || f["chosen"] != "Smart" {
		t.Fatalf("model frame after choosing = %v", f)
	}
	if g := other.expect("model"); g["chosen"] != "Smart" {
		t.Fatalf("the other connection got %v", g)
	}
	c.expect("reply")
	if got := lastModelAsked(t, llm); got != "smart-1" {
		t.Fatalf("after choosing Smart the request asks for %q", got)
	}
	// It survives a reset.
	c.send(map[string]any{"type": "reset"})
	c.expect("reset")
	c.send(map[string]any{"type": "message", "id": "c-3", "text": "again"})
	c.expect("reply")
	if got := lastModelAsked(t, llm); got != "smart-1" {
		t.Fatalf("after a reset the request asks for %q", got)
	}
	c.send(map[string]any{"type": "model", "name": "Turbo"})
	if er := c.expect("error"); er["code"] != "not_found" || !strings.Contains(er["message"].(string), "the models are: Fast, Smart") {
		t.Fatalf("unknown model: %v", er)
	}

	c.send(map[string]any{"type": "status"})
	st := c.expect("status")
	hist := st["history"].(map[string]any)
	model := st["model"].(map[string]any)
	reset := st["reset"].(map[string]any)
	usage := st["usage"].(map[string]any)
	day := usage["day"].(map[string]any)
	// "again" and its answer "seen": 5 + 5 estimated tokens.
	if st["conversation"] == "" || num(st["messages"]) != 2 || num(hist["messages"]) != 2 || num(hist["tokens"]) != 10 ||
		num(hist["context_tokens"]) != 8000 || hist["percent"].(float64) != 0.1 || st["summary"] != nil {
		t.Fatalf("status = %v", st)
	}
	if model["name"] != "Smart" || model["id"] != "smart-1" || st["busy_mode"] != "collect" {
		t.Fatalf("status model, busy mode = %v, %v", model, st["busy_mode"])
	}
	// The next 04:00 in Berlin after the conversation started (14:00).
	if reset["mode"] != "daily" || reset["timezone"] != "Europe/Berlin" || num(reset["at_hour"]) != 4 || reset["reason"] != "daily" ||
		reset["next"] != "2026-06-02T02:00:00Z" || reset["due"] != nil {
		t.Fatalf("status reset = %v", reset)
	}
	// hi 0.002 (the default's prices), hello and again 0.04 each (Smart's).
	if num(day["turns"]) != 3 || num(day["prompt_tokens"])+num(day["completion_tokens"]) != 6 ||
		math.Abs(day["cost"].(float64)-0.082) > 1e-9 || usage["day_ends"] != "2026-06-01T22:00:00Z" || usage["over"] != nil {
		t.Fatalf("status usage = %v", usage)
	}
	if b := usage["budget"].(map[string]any); num(b["tokens_per_day"]) != 1000 || b["cost_per_month"] != 2.0 {
		t.Fatalf("status budget = %v", b)
	}

	// Back to the default; the next morning the reset is due.
	c.send(map[string]any{"type": "model", "name": ""})
	if f := c.expect("model"); f["chosen"] != "" || f["current"].(map[string]any)["id"] != "m" {
		t.Fatalf("back to the default: %v", f)
	}
	clock.Advance(15 * time.Hour)
	c.send(map[string]any{"type": "status"})
	if reset := c.expect("status")["reset"].(map[string]any); reset["due"] != true {
		t.Fatalf("status the next morning: reset %v", reset)
	}
}

// modelNames is a model frame's models as "name:id:context" words.
func modelNames(f map[string]any) string {
	var out []string
	for _, m := range f["models"].([]any) {
		md := m.(map[string]any)
		out = append(out, fmt.Sprintf("%s:%s:%d", md["name"], md["id"], num(md["context_tokens"])))
	}
	return strings.Join(out, " ")
}

// Without agent.models the model frame is refused with unsupported, and
// ready says so; status still answers.
func TestModelFrameWithoutModels(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	e, _ := modelEnv(t, nil, sessions.Policy{MaxHistory: 100}, clock)
	c, ready := e.connect(map[string]any{"user": "ann"})
	if ready["models"] != false {
		t.Fatalf("ready = %v, want models: false", ready)
	}
	c.send(map[string]any{"type": "model", "name": "Smart"})
	if er := c.expect("error"); er["code"] != "unsupported" || !strings.Contains(er["message"].(string), "agent.models") {
		t.Fatalf("model without models: %v", er)
	}
	c.send(map[string]any{"type": "status"})
	st := c.expect("status")
	if st["model"].(map[string]any)["id"] != "m" || num(st["history"].(map[string]any)["context_tokens"]) != 500 ||
		st["reset"].(map[string]any)["mode"] != "none" || st["reset"].(map[string]any)["next"] != nil {
		t.Fatalf("status = %v", st)
	}
}
