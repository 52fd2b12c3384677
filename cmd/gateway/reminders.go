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
