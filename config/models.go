package config

import (
	"fmt"
	"io"
	"strings"
)

// Model is one entry of agent.models: a model a chat may choose with
// /model (Telegram) or the model frame (WebSocket).
type Model struct {
	// Name is what users see and choose; unique (whatever the case).
	Name string `yaml:"name"`
	// Model is the model id sent to the API.
	Model string `yaml:"model"`
	// ContextTokens is the model's context window, for /status (0:
	// unknown).
	ContextTokens int `yaml:"context_tokens"`
	// Prices per 1,000 tokens, as agent.openai's; unset: agent.openai's.
	PricePer1KPrompt     *float64 `yaml:"price_per_1k_prompt"`
	PricePer1KCompletion *float64 `yaml:"price_per_1k_completion"`
}

// MaxModelName bounds a model's name in bytes: a Telegram button carries
// it after "model:" in its callback data, which holds 64 bytes.
const MaxModelName = 64 - len("model:")

// ResolvedModel is an agent.models entry with its prices resolved: its
// own, else agent.openai's.
type ResolvedModel struct {
	Name                 string
	Model                string
	ContextTokens        int
	PricePer1KPrompt     float64
	PricePer1KCompletion float64
}

// ResolvedModels are agent.models with each price resolved, in the file's order.
func (a Agent) ResolvedModels() []ResolvedModel {
	out := make([]ResolvedModel, 0, len(a.Models))
	for _, m := range a.Models {
		r := ResolvedModel{Name: m.Name, Model: m.Model, ContextTokens: m.ContextTokens,
			PricePer1KPrompt: a.OpenAI.PricePer1KPrompt, PricePer1KCompletion: a.OpenAI.PricePer1KCompletion}
		if m.PricePer1KPrompt != nil {
			r.PricePer1KPrompt = *m.PricePer1KPrompt
		}
		if m.PricePer1KCompletion != nil {
			r.PricePer1KCompletion = *m.PricePer1KCompletion
		}
		out = append(out, r)
	}
	return out
}

// validateModels checks agent.models and agent.openai.context_tokens.
func (c *Config) validateModels() Errors {
	var errs Errors
	bad := func(path, format string, args ...any) { errs = append(errs, c.errAt(path, format, args...)) }
	if n := c.Agent.OpenAI.ContextTokens; n < 0 {
		bad("agent.openai.context_tokens", "must be 0 (unknown) or more, got %d", n)
	}
	named := map[string]string{} // lower-cased name → path of the entry that has it
	for i, m := range c.Agent.Models {
		p := fmt.Sprintf("agent.models[%d]", i)
		required := func(key, what string) {
			if isBroken(c.broken, p+"."+key) {
				return
			}
			e := c.errAt(p+"."+key, "required: %s", what)
			if e.Line == 0 {
				e.Line = c.lines[p] // the key is missing: the entry's own line
			}
			errs = append(errs, e)
		}
		switch lower := strings.ToLower(m.Name); {
		case strings.TrimSpace(m.Name) == "":
			required("name", "the name users see and choose")
		case strings.TrimSpace(m.Name) != m.Name:
			bad(p+".name", "%q has spaces around it", m.Name)
		case strings.ContainsAny(m.Name, "\n\r\t"):
			bad(p+".name", "%q has a line break or a tab", m.Name)
		case len(m.Name) > MaxModelName:
			bad(p+".name", "%q is longer than %d bytes (a Telegram button carries it)", m.Name, MaxModelName)
		case named[lower] != "":
			bad(p+".name", "%q is already the name of %s (%s); names differ in more than case", m.Name, named[lower], c.where(named[lower]))
		default:
			named[lower] = p
		}
		switch {
		case strings.TrimSpace(m.Model) == "":
			required("model", "the model id sent to the API")
		case strings.TrimSpace(m.Model) != m.Model:
			bad(p+".model", "%q has spaces around it", m.Model)
		}
		if m.ContextTokens < 0 {
			bad(p+".context_tokens", "must be 0 (unknown) or more, got %d", m.ContextTokens)
		}
		if m.PricePer1KPrompt != nil && *m.PricePer1KPrompt < 0 {
			bad(p+".price_per_1k_prompt", "must not be negative")
		}
		if m.PricePer1KCompletion != nil && *m.PricePer1KCompletion < 0 {
			bad(p+".price_per_1k_completion", "must not be negative")
		}
	}
	if len(c.Agent.Models) > 0 && c.Agent.Backend != "openai" {
		c.warn("agent.models", "the %s backend answers alike whichever model a chat chooses: the choice is stored and shown, and reaches the model only with backend openai", c.Agent.Backend)
	}
	return errs
}

// describeModels prints the models a chat may choose, and the context
// size of the default one.
func (c *Config) describeModels(tw io.Writer) {
	if len(c.Agent.Models) == 0 && c.Agent.OpenAI.ContextTokens == 0 {
		return
	}
	fmt.Fprintf(tw, "models\n")
	def := c.Agent.OpenAI.Model
	if c.Agent.Backend != "openai" {
		def = c.Agent.Backend
	}
	ctx := "unknown"
	if n := c.Agent.OpenAI.ContextTokens; n > 0 {
		ctx = fmt.Sprintf("%d tokens", n)
	}
	fmt.Fprintf(tw, "  default\t%s, context %s\t%s\n", def, ctx, c.from("agent.openai.context_tokens"))
	for i, m := range c.Agent.ResolvedModels() {
		ctx := "unknown"
		if m.ContextTokens > 0 {
			ctx = fmt.Sprintf("%d tokens", m.ContextTokens)
		}
		p := fmt.Sprintf("agent.models[%d]", i)
		fmt.Fprintf(tw, "  %s\t%s, context %s, %g/%g per 1k\t%s (%s)\n", m.Name, m.Model, ctx,
			m.PricePer1KPrompt, m.PricePer1KCompletion, p, c.where(p))
	}
}
