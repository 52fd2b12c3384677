package admin

// Schedules: the operator's schedules (bot.yaml schedules) with their
// next due times and their last fires, one schedule's fires, and a
// session's reminders, fires and opt-ins. `gateway schedules` prints the
// same report (BuildScheduleReport).

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/query"
)

// Sizes of the schedule reports.
const (
	// NextFires is how many due times ahead a schedule shows.
	NextFires = 3
	// DefaultLastFires is how many of its latest fires it shows.
	DefaultLastFires = 3
	maxFires         = 1000
	defaultFires     = 50
)

// ScheduleRow is one operator schedule in a report: how it is written,
// its next due times and its latest fires.
type ScheduleRow struct {
	Name string `json:"name"`
	// When is the schedule's times as written ("cron 0 8 * * 1-5",
	// "every 30m0s 08:00-22:00"), read in Timezone.
	When     string `json:"when"`
	Timezone string `json:"timezone"`
	Channel  string `json:"channel"`
	Target   string `json:"target"`
	// SessionKey is the conversation of a schedule with one target;
	// AllSessions: every session of Channel that opted in gets it.
	SessionKey  string      `json:"session_key,omitempty"`
	AllSessions bool        `json:"all_sessions"`
	Misfire     string      `json:"misfire"`
	MaxLate     string      `json:"max_late,omitempty"`
	Quiet       bool        `json:"quiet"`
	Next        []time.Time `json:"next"`
	Last        []FireRow   `json:"last"`
}

// FireRow is one fire: its key and session, when it was due, how late it
// was claimed, and how it ended (or where it stands).
type FireRow struct {
	ScheduleKey    string     `json:"schedule_key"`
	SessionKey     string     `json:"session_key,omitempty"`
	Due            time.Time  `json:"due"`
	State          string     `json:"state"`
	LagMS          int64      `json:"lag_ms"`
	Attempt        int        `json:"attempt,omitempty"`
	Reason         string     `json:"reason,omitempty"`
	DeliveryRef    string     `json:"delivery_ref,omitempty"`
	ConversationID string     `json:"conversation_id,omitempty"`
	TurnSeq        int64      `json:"turn_seq,omitempty"`
	EndedAt        *time.Time `json:"ended_at,omitempty"`
}

// FireRowOf is f as a report shows it.
func FireRowOf(f ledger.ScheduleFire) FireRow {
	return FireRow{ScheduleKey: f.ScheduleKey, SessionKey: f.SessionKey, Due: f.DueAt.UTC(), State: f.State, LagMS: f.LateMS,
		Attempt: f.Attempt, Reason: f.Reason, DeliveryRef: f.DeliveryRef, ConversationID: f.ConversationID, TurnSeq: f.TurnSeq, EndedAt: f.EndedAt}
}

// ScheduleReport is the answer of GET /admin/api/schedules and what
// `gateway schedules` prints.
type ScheduleReport struct {
	At        time.Time           `json:"at"`
	Schedules []ScheduleRow       `json:"schedules"`
	Reminders query.ReminderCount `json:"reminders"`
}

// BuildScheduleReport reports the schedules in list at now, each with
// its NextFires due times and its last stored fires.
func BuildScheduleReport(ctx context.Context, q query.Fires, list []sessions.OperatorSchedule, now time.Time, last int) (ScheduleReport, error) {
	rep := ScheduleReport{At: now.UTC(), Schedules: []ScheduleRow{}}
	for _, s := range list {
		row := ScheduleRow{Name: s.Name, When: s.Spec(), Timezone: s.When.Location().String(), Channel: s.Target.Channel, Target: s.Target.TargetText(),
			SessionKey: s.Target.SessionKey, AllSessions: s.Target.AllSessions, Misfire: s.Misfire.Rule, Quiet: s.Quiet, Next: []time.Time{}, Last: []FireRow{}}
		if row.Misfire == "" {
			row.Misfire = schedules.MisfireOnce
		}
		if row.Misfire == schedules.MisfireOnce {
			late := s.Misfire.MaxLate
			if late == 0 {
				late = schedules.DefaultMaxLate
			}
			row.MaxLate = late.String()
		}
		for _, t := range s.NextFires(now, NextFires) {
			row.Next = append(row.Next, t.UTC())
		}
		if last > 0 {
			fires, err := q.OperatorFires(ctx, s.Name, last)
			if err != nil {
				return rep, err
			}
			for _, f := range fires {
				row.Last = append(row.Last, FireRowOf(f))
			}
		}
		rep.Schedules = append(rep.Schedules, row)
	}
	var err error
	rep.Reminders, err = q.ReminderCount(ctx)
	return rep, err
}

// schedulesNow is the schedules in force, none without a timetable.
func (a *Admin) schedulesNow() []sessions.OperatorSchedule {
	if a.opts.Timetable == nil {
		return nil
	}
	return a.opts.Timetable.Schedules()
}

// schedules answers GET /admin/api/schedules[?last=N].
func (a *Admin) schedules(w http.ResponseWriter, r *http.Request, who string) {
	last, err := intParam(r, "last", DefaultLastFires, 100)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	a.logAction(r, who, "schedules", "")
	rep, err := BuildScheduleReport(r.Context(), a.opts.Store, a.schedulesNow(), a.opts.Now(), last)
	if err != nil {
		a.storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// scheduleFires is the answer of GET /admin/api/schedules/{name}/fires.
type scheduleFires struct {
	Name string `json:"name"`
	// Configured is false for a schedule no longer in bot.yaml whose
	// fires are still stored.
	Configured bool      `json:"configured"`
	Fires      []FireRow `json:"fires"`
}

// ScheduleFires reads the latest limit fires of the schedule called
// name; ok is false when it is neither configured nor has fires stored.
func ScheduleFires(ctx context.Context, q query.Fires, list []sessions.OperatorSchedule, name string, limit int) (out scheduleFires, ok bool, err error) {
	out = scheduleFires{Name: name, Fires: []FireRow{}}
	for _, s := range list {
		out.Configured = out.Configured || s.Name == name
	}
	fires, err := q.OperatorFires(ctx, name, limit)
	if err != nil {
		return out, false, err
	}
	for _, f := range fires {
		out.Fires = append(out.Fires, FireRowOf(f))
	}
	return out, out.Configured || len(fires) > 0, nil
}

func (a *Admin) scheduleFires(w http.ResponseWriter, r *http.Request, who string) {
	name := r.PathValue("name")
	limit, ok := firesLimit(w, r)
	if !ok {
		return
	}
	a.logAction(r, who, "schedule fires", name)
	out, ok, err := ScheduleFires(r.Context(), a.opts.Store, a.schedulesNow(), name, limit)
	if err != nil {
		a.storeError(w, err)
		return
	}
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no schedule %q in the configuration, and no fires of it stored", name))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// reminderRow is a reminder as the admin API shows it.
type reminderRow struct {
	ID        int64      `json:"id"`
	Spec      string     `json:"spec"`
	Timezone  string     `json:"timezone,omitempty"`
	Text      string     `json:"text"`
	NextDueAt *time.Time `json:"next_due_at,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
}

// sessionSchedules is the answer of GET /admin/api/sessions/{key}/schedules.
type sessionSchedules struct {
	SessionKey string        `json:"session_key"`
	Reminders  []reminderRow `json:"reminders"`
	OptIns     []string      `json:"opt_ins"`
	Fires      []FireRow     `json:"fires"`
}

func (a *Admin) sessionSchedules(w http.ResponseWriter, r *http.Request, who string) {
	key := r.PathValue("key")
	limit, ok := firesLimit(w, r)
	if !ok {
		return
	}
	a.logAction(r, who, "session schedules", key)
	out := sessionSchedules{SessionKey: key, Reminders: []reminderRow{}, OptIns: []string{}, Fires: []FireRow{}}
	rems, err := a.opts.Store.Reminders(r.Context(), key)
	if err == nil {
		for _, rm := range rems {
			out.Reminders = append(out.Reminders, reminderRow{ID: rm.ID, Spec: rm.Spec, Timezone: rm.Timezone, Text: rm.Text,
				NextDueAt: rm.NextDueAt, CreatedAt: rm.CreatedAt})
		}
		var names []string
		if names, err = a.opts.Store.SessionOptIns(r.Context(), key); err == nil && names != nil {
			out.OptIns = names
		}
	}
	if err == nil {
		var fires []ledger.ScheduleFire
		if fires, err = a.opts.Store.SessionFires(r.Context(), key, limit); err == nil {
			for _, f := range fires {
				out.Fires = append(out.Fires, FireRowOf(f))
			}
		}
	}
	if err != nil {
		a.storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// firesLimit is the request's limit of fires (1 to maxFires, default
// defaultFires); false when it was refused, with the answer written.
func firesLimit(w http.ResponseWriter, r *http.Request) (int, bool) {
	limit, err := intParam(r, "limit", defaultFires, maxFires)
	if err == nil && limit == 0 {
		err = fmt.Errorf("limit: want a whole number from 1 to %d, got 0", maxFires)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return 0, false
	}
	return limit, true
}
