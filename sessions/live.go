package sessions

import (
	"maps"
	"slices"

	"github.com/chatgate/chatgate/agent"
)

// liveSettings is what a configuration reload may change in a running
// Manager. It is swapped whole: a turn reads it once, when it starts, and
// finishes with what it read.
type liveSettings struct {
	policies     map[string]Policy
	def          Policy
	instructions string
	agent        agent.Agent
	compactor    agent.Agent // writes summaries; nil: agent does
	// models are the models a key may choose (Standing.ChooseModel), and
	// contextTokens the context window of the agent's own model (0:
	// unknown). They follow the agent.
	models        []Model
	contextTokens int
}

// settings returns the settings in force now.
func (m *Manager) settings() *liveSettings { return m.live.Load() }

// Settings is what Reconfigure replaces in a running Manager.
type Settings struct {
	// Policies by channel name; a channel without one gets the
	// Manager's DefaultPolicy.
	Policies map[string]Policy
	// Instructions is the system prompt.
	Instructions string
	// Agent writes the replies of turns that start from now on; nil keeps
	// the current one.
	Agent agent.Agent
	// Compactor writes the summaries of compaction (a model of its own);
	// nil: Agent does. Both stay as they are when Agent is nil.
	Compactor agent.Agent
	// Models and ContextTokens replace Options' with Agent (and stay
	// as they are when Agent is nil).
	Models        []Model
	ContextTokens int
}

// Settings are the settings in force: those of the last Reconfigure, or
// of Options. A turn that starts now runs with them.
func (m *Manager) Settings() Settings {
	s := m.settings()
	return Settings{Policies: maps.Clone(s.policies), Instructions: s.instructions, Agent: s.agent, Compactor: s.compactor,
		Models: slices.Clone(s.models), ContextTokens: s.contextTokens}
}

// Reconfigure applies new policies, instructions and agent to the turns
// that start from now on; running turns finish with what they started
// with. (The Sweeper's Reschedule follows the new policies' sweeps.)
func (m *Manager) Reconfigure(s Settings) {
	old := m.settings()
	next := &liveSettings{policies: maps.Clone(s.Policies), def: old.def, instructions: s.Instructions, agent: s.Agent, compactor: s.Compactor,
		models: slices.Clone(s.Models), contextTokens: s.ContextTokens}
	if next.policies == nil {
		next.policies = map[string]Policy{}
	}
	if next.agent == nil {
		next.agent, next.compactor = old.agent, old.compactor
		next.models, next.contextTokens = old.models, old.contextTokens
	}
	m.live.Store(next)
}
