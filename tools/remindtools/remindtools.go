// Package remindtools is the gateway's own MCP server of reminder tools
// (create, list, cancel), served in the process over the SDK's in-memory
// transport. The gateway's MCP client calls it as any other server, so its
// calls go through the same tool ledger, approval, metrics and tool frames.
//
// Whom a call acts for is the turn's session, which the gateway's client
// puts in the request's _meta (tools.MetaSessionKey, tools.MetaChannel;
// mcpclient.ServerConfig.Caller): the model writes only the arguments,
// which name no session, so it can neither make, see nor cancel another
// user's reminders. A call without that _meta is refused. The server
// trusts its _meta because nothing but the gateway's client can reach it.
//
// Create is keyed by the call's idempotency key (tools.MetaKey): run again
// after a crash cut it, it finds the reminder it made rather than making
// a second, so the tools are safe to mark idempotent.
package remindtools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/chatgate/chatgate/tools/inproc"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/tools"
)

// ServerName is the server's name: its tools are offered to the model as
// reminders__create, reminders__list and reminders__cancel.
const ServerName = "reminders"

// Backend is what the tools act on (sessions.Reminders).
type Backend interface {
	Create(ctx context.Context, req sessions.ReminderRequest) (ledger.Reminder, error)
	List(ctx context.Context, sessionKey string) ([]ledger.Reminder, error)
	Cancel(ctx context.Context, sessionKey string, id int64) error
}

// CreateInput is the arguments of create.
type CreateInput struct {
	Text        string `json:"text" jsonschema:"what to remind the user of, as the assistant should be told when the reminder fires, such as: Remind the user to call Ann"`
	At          string `json:"at,omitempty" jsonschema:"for a reminder that fires once: the time, RFC 3339 with the user's UTC offset, such as 2026-03-29T18:00:00+02:00; it must be in the future"`
	Cron        string `json:"cron,omitempty" jsonschema:"for a recurring reminder: five cron fields (minute hour day-of-month month day-of-week) read in timezone, such as 0 8 * * 1-5 for weekdays at 08:00"`
	Every       string `json:"every,omitempty" jsonschema:"for a recurring reminder: an interval of whole minutes, such as 2h or 90m (1m to 24h), counted from local midnight or from the start of active_hours"`
	ActiveHours string `json:"active_hours,omitempty" jsonschema:"with every only: the window it fires in, HH:MM-HH:MM in timezone, such as 08:00-22:00"`
	Timezone    string `json:"timezone,omitempty" jsonschema:"the user's IANA time zone, such as Europe/Berlin (default UTC): cron times and active hours are read in it, and the reminder is shown in it"`
}

// CancelInput is the arguments of cancel.
type CancelInput struct {
	ID int64 `json:"id" jsonschema:"the reminder's number, as list shows it"`
}

// ListInput is the arguments of list: none.
type ListInput struct{}

// NewServer returns the MCP server of the reminder tools over b (nil
// until the session manager is built: a call then fails).
func NewServer(b func() Backend) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "chatgate-reminders", Version: "1"}, nil)
	h := handlers{backend: b}
	mcp.AddTool(s, &mcp.Tool{Name: "create", Description: "Set a reminder for the user: it fires once (at) or " +
		"repeatedly (cron or every), and at each fire you are given its text and write the reminder to the user. " +
		"Give exactly one of at, cron and every. Ask the user for their time zone if you do not know it."}, h.create)
	mcp.AddTool(s, &mcp.Tool{Name: "list", Description: "List the user's reminders: number, next time in their time zone, how it repeats, and text."}, h.list)
	mcp.AddTool(s, &mcp.Tool{Name: "cancel", Description: "Cancel one of the user's reminders by its number (see list)."}, h.cancel)
	return s
}

type handlers struct {
	backend func() Backend
}

// caller is whom the call acts for, from the request's _meta that the
// gateway's client wrote.
func (h handlers) caller(req *mcp.CallToolRequest) (Backend, tools.Caller, string, error) {
	var c tools.Caller
	meta := req.Params.GetMeta()
	c.SessionKey, _ = meta[tools.MetaSessionKey].(string)
	c.Channel, _ = meta[tools.MetaChannel].(string)
	c.UserID, _ = meta[tools.MetaUserID].(string)
	c.Scheduled, _ = meta[tools.MetaScheduled].(bool)
	key, _ := meta[tools.MetaKey].(string)
	if c.SessionKey == "" || c.Channel == "" {
		return nil, c, "", errors.New("reminders can only be managed from a chat turn")
	}
	var b Backend
	if h.backend != nil {
		b = h.backend()
	}
	if b == nil {
		return nil, c, "", errors.New("reminders are not ready yet")
	}
	return b, c, key, nil
}

func (h handlers) create(ctx context.Context, req *mcp.CallToolRequest, in CreateInput) (*mcp.CallToolResult, any, error) {
	b, c, key, err := h.caller(req)
	if err != nil {
		return nil, nil, err
	}
	if c.Scheduled {
		// A fire's turn runs with nobody reading: a reminder it made
		// could make the next, each a model call nobody asked for.
		return nil, nil, errors.New("a scheduled turn cannot set reminders: only the user, in the chat, can")
	}
	spec, err := in.spec()
	if err != nil {
		return nil, nil, err
	}
	r, err := b.Create(ctx, sessions.ReminderRequest{SessionKey: c.SessionKey, Channel: c.Channel, Spec: spec, Text: in.Text, CallKey: key})
	if err != nil {
		return nil, nil, userError(err)
	}
	return text("Reminder %d is set. %s", r.ID, Describe(r)), nil, nil
}

func (h handlers) list(ctx context.Context, req *mcp.CallToolRequest, _ ListInput) (*mcp.CallToolResult, any, error) {
	b, c, _, err := h.caller(req)
	if err != nil {
		return nil, nil, err
	}
	list, err := b.List(ctx, c.SessionKey)
	if err != nil {
		return nil, nil, userError(err)
	}
	if len(list) == 0 {
		return text("The user has no reminders."), nil, nil
	}
	var sb strings.Builder
	for _, r := range list {
		fmt.Fprintf(&sb, "%d. %s\n", r.ID, Describe(r))
	}
	return text("%s", strings.TrimSpace(sb.String())), nil, nil
}

func (h handlers) cancel(ctx context.Context, req *mcp.CallToolRequest, in CancelInput) (*mcp.CallToolResult, any, error) {
	b, c, _, err := h.caller(req)
	if err != nil {
		return nil, nil, err
	}
	if err := b.Cancel(ctx, c.SessionKey, in.ID); err != nil {
		return nil, nil, userError(err)
	}
	return text("Reminder %d is cancelled.", in.ID), nil, nil
}

// spec is the arguments' schedule.
func (in CreateInput) spec() (schedules.Spec, error) {
	spec := schedules.Spec{Cron: strings.TrimSpace(in.Cron), Hours: strings.TrimSpace(in.ActiveHours), Timezone: strings.TrimSpace(in.Timezone)}
	if at := strings.TrimSpace(in.At); at != "" {
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			return spec, fmt.Errorf("at %q is not an RFC 3339 time such as 2026-03-29T18:00:00+02:00", at)
		}
		spec.At = t
	}
	if every := strings.TrimSpace(in.Every); every != "" {
		d, err := time.ParseDuration(every)
		if err != nil || d <= 0 {
			return spec, fmt.Errorf("every %q is not a duration such as 2h or 90m", every)
		}
		spec.Every = d
	}
	return spec, nil
}

// userError is what the model is told of a refusal: the reason, not the
// internals of a storage failure.
func userError(err error) error {
	for _, known := range []error{sessions.ErrRemindersOff, sessions.ErrBadReminder, sessions.ErrTooManyReminders, sessions.ErrNoSuchReminder} {
		if errors.Is(err, known) {
			return err
		}
	}
	return errors.New("the reminders could not be reached; try again later")
}

var text = inproc.Text

// Describe is a reminder in one line: its next time on its zone's clock,
// how it repeats, and its text.
func Describe(r ledger.Reminder) string {
	next := "due no more"
	if t := sessions.ReminderNext(r); !t.IsZero() {
		next = "next " + t.Format("Mon 2 Jan 2006 15:04 MST")
		if r.Timezone != "" {
			next += " (" + r.Timezone + ")"
		}
	}
	if rep := sessions.ReminderRepeats(r); rep != "" {
		next += ", " + rep
	}
	return next + ": " + r.Text
}
