package main

import (
	"github.com/chatgate/chatgate/config"
	"github.com/chatgate/chatgate/sessions"
)

// reminderPolicy is a channel's session.schedules as the session manager
// takes it (Reminders.Create enforces it; a reload hands it over with the
// rest of the policy).
func reminderPolicy(p config.Policy) sessions.ReminderPolicy {
	return sessions.ReminderPolicy{Enabled: p.Schedules.Enabled.V, MaxPerUser: p.Schedules.MaxPerUser.V, MinInterval: p.Schedules.MinInterval.V}
}

// memoryPolicy is a channel's session.memory as the session manager
// takes it, its users' own settings included.
func memoryPolicy(p config.Policy) sessions.MemoryPolicy {
	of := func(m config.Memory) sessions.MemorySettings {
		return sessions.MemorySettings{Enabled: m.Enabled.V, InjectTokens: m.InjectTokens.V, MaxNotes: m.MaxNotes.V, ExtractOnReset: m.ExtractOnReset.V,
			AskTools: m.Approve.V == config.ApproveAsk}
	}
	mp := sessions.MemoryPolicy{Default: of(p.Memory)}
	if len(p.UserMemory) > 0 {
		mp.Users = make(map[string]sessions.MemorySettings, len(p.UserMemory))
		for u, m := range p.UserMemory {
			mp.Users[u] = of(m)
		}
	}
	return mp
}
