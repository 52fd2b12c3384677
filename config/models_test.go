package config

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

const fullModels = `
agent:
  backend: openai
  openai:
    model: gpt-4o-mini
    context_tokens: 128000
    price_per_1k_prompt: 0.15
    price_per_1k_completion: 0.6
  models:
    - name: Fast
      model: gpt-4o-mini
      context_tokens: 128000
    - name: Smart
      model: gpt-4o
      context_tokens: 128000
      price_per_1k_prompt: 2.5
      price_per_1k_completion: 10
    - name: Local
      model: llama3.1:8b
      price_per_1k_prompt: 0
`

func TestModelsFullConfig(t *testing.T) {
	c := mustParse(t, fullModels)
	want := []ResolvedModel{
		{Name: "Fast", Model: "gpt-4o-mini", ContextTokens: 128000, PricePer1KPrompt: 0.15, PricePer1KCompletion: 0.6},
		{Name: "Smart", Model: "gpt-4o", ContextTokens: 128000, PricePer1KPrompt: 2.5, PricePer1KCompletion: 10},
		// A price of its own, even 0, is its own; the other falls back.
		{Name: "Local", Model: "llama3.1:8b", PricePer1KPrompt: 0, PricePer1KCompletion: 0.6},
	}
	if got := c.Agent.ResolvedModels(); !reflect.DeepEqual(got, want) {
		t.Fatalf("models = %+v\nwant %+v", got, want)
	}
	if c.Agent.OpenAI.ContextTokens != 128000 {
		t.Fatalf("context_tokens = %d", c.Agent.OpenAI.ContextTokens)
	}
	if len(c.Warnings) != 0 {
		t.Fatalf("warnings: %v", c.Warnings)
	}
	var out bytes.Buffer
	c.Describe(&out)
	for _, line := range []string{
		"models\n",
		"  default  gpt-4o-mini, context 128000 tokens",
		"agent.openai.context_tokens (bot.yaml:5)",
		"  Smart    gpt-4o, context 128000 tokens, 2.5/10 per 1k",
		"agent.models[1] (bot.yaml:12)",
		"  Local    llama3.1:8b, context unknown, 0/0.6 per 1k",
	} {
		if !strings.Contains(out.String(), line) {
			t.Fatalf("check output lacks %q:\n%s", line, out.String())
		}
	}
}

func TestModelsOffByDefault(t *testing.T) {
	c := mustParse(t, "agent:\n  backend: echo\n")
	if len(c.Agent.Models) != 0 || len(c.Agent.ResolvedModels()) != 0 || c.Agent.OpenAI.ContextTokens != 0 {
		t.Fatalf("models %+v, context %d", c.Agent.Models, c.Agent.OpenAI.ContextTokens)
	}
	var out bytes.Buffer
	c.Describe(&out)
	if strings.Contains(out.String(), "models\n") {
		t.Fatalf("check output shows models without any:\n%s", out.String())
	}
}

// With the echo backend the choice reaches no model: said once, not refused.
func TestModelsWithEchoWarn(t *testing.T) {
	c := mustParse(t, "agent:\n  models:\n    - {name: A, model: a}\n")
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "bot.yaml:3: agent.models: the echo backend answers alike") {
		t.Fatalf("warnings = %q", c.Warnings)
	}
}

func TestModelsErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"name missing", `
agent:
  models:
    - model: gpt-4o
`, []string{`3: agent.models[0].name: required: the name users see and choose`}},
		{"model missing", `
agent:
  models:
    - name: Smart
`, []string{`3: agent.models[0].model: required: the model id sent to the API`}},
		{"model empty", `
agent:
  models:
    - name: Smart
      model: ""
`, []string{`4: agent.models[0].model: required: the model id sent to the API`}},
		{"duplicate name", `
agent:
  models:
    - {name: Smart, model: gpt-4o}
    - {name: smart, model: gpt-4.1}
`, []string{`4: agent.models[1].name: "smart" is already the name of agent.models[0] (bot.yaml:3); names differ in more than case`}},
		{"name with spaces around it", `
agent:
  models:
    - {name: " Smart", model: gpt-4o}
`, []string{`3: agent.models[0].name: " Smart" has spaces around it`}},
		{"name too long", `
agent:
  models:
    - {name: "` + strings.Repeat("x", MaxModelName+1) + `", model: gpt-4o}
`, []string{`3: agent.models[0].name: "` + strings.Repeat("x", MaxModelName+1) + `" is longer than 58 bytes (a Telegram button carries it)`}},
		{"negative context", `
agent:
  models:
    - name: Smart
      model: gpt-4o
      context_tokens: -1
`, []string{`5: agent.models[0].context_tokens: must be 0 (unknown) or more, got -1`}},
		{"negative price", `
agent:
  models:
    - name: Smart
      model: gpt-4o
      price_per_1k_completion: -0.5
`, []string{`5: agent.models[0].price_per_1k_completion: must not be negative`}},
		{"default model's context negative", `
agent:
  openai:
    context_tokens: -5
`, []string{`3: agent.openai.context_tokens: must be 0 (unknown) or more, got -5`}},
		{"unknown key", `
agent:
  models:
    - name: Smart
      model: gpt-4o
      context: 128000
`, []string{`5: agent.models[0].context: unknown key "context" in agent.models[0] (known keys: context_tokens, model, name`}},
		{"not a list", `
agent:
  models: {name: Smart, model: gpt-4o}
`, []string{`2: agent.models: cannot use a mapping here: want a list`}},
		{"a price of the wrong type, reported once", `
agent:
  models:
    - name: Smart
      model: gpt-4o
      price_per_1k_prompt: cheap
`, []string{`5: agent.models[0].price_per_1k_prompt: cannot use !!str`}},
		{"every problem at once", `
agent:
  models:
    - {model: a}
    - {name: B}
    - {name: b, model: c, context_tokens: -1}
`, []string{
			`3: agent.models[0].name: required`,
			`4: agent.models[1].model: required`,
			`5: agent.models[2].name: "b" is already the name of agent.models[1] (bot.yaml:4)`,
			`5: agent.models[2].context_tokens: must be 0 (unknown) or more, got -1`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := problems(t, tt.yaml)
			if len(got) != len(tt.want) {
				t.Fatalf("problems:\n%s\nwant %d, starting with\n%s", strings.Join(got, "\n"), len(tt.want), strings.Join(tt.want, "\n"))
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tt.want[i]) {
					t.Fatalf("problem %d:\n%s\nwant it to start with\n%s\n(all: %s)", i, got[i], tt.want[i], strings.Join(got, "\n"))
				}
			}
		})
	}
}
