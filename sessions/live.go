package sessions

import (
	"fmt"
	"maps"
	"slices"

	"github.com/robfig/cron/v3"

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
	// models are the models a key may choose (models.go), and
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
// with. The daily and idle sweeps are rescheduled for the new policies.
func (m *Manager) Reconfigure(s Settings) error {
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
	return m.reschedule()
}

// reschedule replaces the cron entries with those the current policies
// need. Before Start (and after Shutdown) there is nothing to replace.
func (m *Manager) reschedule() error {
	m.cronMu.Lock()
	defer m.cronMu.Unlock()
	if m.cron == nil {
		return nil
	}
	for name, id := range m.cronIDs {
		m.cron.Remove(id)
		delete(m.cronIDs, name)
	}
	return m.addSchedules(m.cron)
}

// addSchedules adds the jobs of Schedules to c; cronMu is held or c not
// yet shared.
func (m *Manager) addSchedules(c *cron.Cron) error {
	for _, s := range m.Schedules() {
		name := s.Name
		job := cron.FuncJob(func() { m.runSchedule(name) })
		if s.Every != nil {
			m.cronIDs[name] = c.Schedule(s.Every, job)
			continue
		}
		id, err := c.AddJob(s.Spec, job)
		if err != nil {
			return fmt.Errorf("schedule %s sweep %q: %w", name, s.Spec, err)
		}
		m.cronIDs[name] = id
	}
	return nil
}
