package schedules

import (
	"strconv"
	"strings"
)

// Schedule keys name a schedule's fires in the store: a fire is the row
// (schedule key, due time), claimed once. An operator's schedule that
// goes to one conversation has one key; one that goes to every session
// of a channel that opted in has one per session, so that each session's
// fire is claimed, run and settled on its own.

// OperatorKey is the key of the bot.yaml schedule called name with one
// target.
func OperatorKey(name string) string { return "schedule:" + name }

// OperatorSessionKey is the key of the fires of the bot.yaml schedule
// called name in one session (a schedule with all_sessions). A name
// holds no ":" (config checks it), so the session key after it is read
// back whole.
func OperatorSessionKey(name, sessionKey string) string {
	return "schedule:" + name + ":" + sessionKey
}

// ReminderKey is the key of a user's reminder by its id.
func ReminderKey(id int64) string { return "reminder:" + strconv.FormatInt(id, 10) }

// ParseKey reads a schedule key: the operator schedule's name and the
// session key of an all_sessions fire ("" otherwise), or a reminder's id.
func ParseKey(key string) (name, sessionKey string, reminder int64, ok bool) {
	if rest, found := strings.CutPrefix(key, "reminder:"); found {
		id, err := strconv.ParseInt(rest, 10, 64)
		return "", "", id, err == nil && id > 0
	}
	rest, found := strings.CutPrefix(key, "schedule:")
	if !found || rest == "" {
		return "", "", 0, false
	}
	name, sessionKey, _ = strings.Cut(rest, ":")
	return name, sessionKey, 0, name != ""
}
