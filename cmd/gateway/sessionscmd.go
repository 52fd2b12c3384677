package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions"
)

// sessionsCmd reads and resets stored conversations. It opens the same
// database as the gateway and can run while the gateway does.
func sessionsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, "gateway sessions: want list, show, export, reset or purge\n\n"+usage)
		return 2
	}
	sub, args := args[0], args[1:]
	fs, path := configFlag("sessions "+sub, stderr)
	key := fs.String("key", "", "only this session `KEY` (list)")
	status := fs.String("status", "", "only active or archived (list)")
	limit := fs.Int("limit", 50, "at most `N` conversations (list)")
	format := fs.String("format", "json", "json or text (export)")
	cfg, code := parseConfig(fs, path, args, stderr)
	if cfg == nil {
		return code
	}
	store, err := openStore(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Fprintf(stderr, "%s: storage: %v\n", cfg.File, err)
		return 1
	}
	defer store.Close()

	arg := fs.Arg(0)
	needArg := func(what string) bool {
		if arg == "" {
			fmt.Fprintf(stderr, "gateway sessions %s: missing %s\n", sub, what)
			return false
		}
		return true
	}
	switch sub {
	case "list":
		convs, err := store.ListConversations(ctx, sessions.ListFilter{SessionKey: *key, Status: *status, Limit: *limit})
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		printConversations(stdout, convs)
	case "show":
		if !needArg("a conversation id or session key") {
			return 2
		}
		return show(ctx, store, arg, stdout, stderr)
	case "export":
		if !needArg("a conversation id") {
			return 2
		}
		return export(ctx, store, arg, *format, stdout, stderr)
	case "reset":
		if !needArg("a session key") {
			return 2
		}
		conv, err := store.ResetKey(ctx, arg, time.Now().UTC())
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		if conv == nil {
			fmt.Fprintf(stdout, "%s has no active conversation\n", arg)
			return 0
		}
		fmt.Fprintf(stdout, "archived %s (%d messages); the next message from %s starts a new conversation\n", conv.ID, conv.LastSeq, arg)
	case "purge":
		return purge(ctx, cfg, store, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "gateway sessions: unknown subcommand %q\n", sub)
		return 2
	}
	return 0
}

func printConversations(w io.Writer, convs []sessions.Conversation) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSESSION KEY\tSTATUS\tMESSAGES\tSTARTED\tLAST ACTIVITY\tRESET")
	for _, c := range convs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", c.ID, c.SessionKey, c.Status, c.LastSeq,
			c.StartedAt.Format(time.RFC3339), c.LastActivityAt.Format(time.RFC3339), c.ResetReason)
	}
	tw.Flush()
}

func show(ctx context.Context, store *sessions.DB, arg string, stdout, stderr io.Writer) int {
	conv, err := store.Conversation(ctx, arg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if conv == nil {
		convs, err := store.ListConversations(ctx, sessions.ListFilter{SessionKey: arg, Limit: 1000})
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		if len(convs) == 0 {
			fmt.Fprintf(stderr, "no conversation or session key %q\n", arg)
			return 1
		}
		printConversations(stdout, convs)
		conv = &convs[0]
		fmt.Fprintln(stdout)
	}
	return export(ctx, store, conv.ID, "text", stdout, stderr)
}

type exportMessage struct {
	Seq         int64           `json:"seq"`
	Role        string          `json:"role"`
	Content     string          `json:"content"`
	ToolCalls   json.RawMessage `json:"tool_calls,omitempty"`
	ToolCallID  string          `json:"tool_call_id,omitempty"`
	ClientMsgID string          `json:"client_msg_id,omitempty"`
	Attachments json.RawMessage `json:"attachments,omitempty"` // metadata, as stored
	ReplyTo     int64           `json:"reply_to,omitempty"`
	Status      string          `json:"status"`
	Error       string          `json:"error,omitempty"`
	CreatedAt   time.Time       `json:"created_at"`
}

func export(ctx context.Context, store *sessions.DB, id, format string, stdout, stderr io.Writer) int {
	conv, err := store.Conversation(ctx, id)
	if err == nil && conv == nil {
		err = fmt.Errorf("no conversation %q", id)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	msgs, err := store.MessagesAfter(ctx, id, 0, 0)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	switch format {
	case "json":
		out := struct {
			Conversation sessions.Conversation `json:"conversation"`
			Messages     []exportMessage       `json:"messages"`
		}{Conversation: *conv, Messages: make([]exportMessage, 0, len(msgs))}
		for _, m := range msgs {
			em := exportMessage{Seq: m.Seq, Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID,
				ReplyTo: m.ReplyTo, Status: m.Status, Error: m.Error, CreatedAt: m.CreatedAt}
			if m.ToolCalls != "" {
				em.ToolCalls = json.RawMessage(m.ToolCalls)
			}
			if m.Attachments != "" {
				em.Attachments = json.RawMessage(m.Attachments)
			}
			if m.ClientMsgID != nil {
				em.ClientMsgID = *m.ClientMsgID
			}
			out.Messages = append(out.Messages, em)
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	case "text":
		fmt.Fprintf(stdout, "conversation %s  key %s  %s", conv.ID, conv.SessionKey, conv.Status)
		if conv.ResetReason != "" {
			fmt.Fprintf(stdout, " (%s)", conv.ResetReason)
		}
		fmt.Fprintf(stdout, "\nstarted %s  agent %s  model %s  tokens %d  cost %.4f\n\n",
			conv.StartedAt.Format(time.RFC3339), conv.AgentName, conv.Model, conv.TotalTokens, conv.Cost)
		for _, m := range msgs {
			status := ""
			if m.Status != sessions.MsgOK {
				status = " [" + m.Status + "]"
			}
			fmt.Fprintf(stdout, "%4d %-9s %s%s%s\n", m.Seq, m.Role, m.Content, attachmentsNote(m.Attachments), status)
		}
	default:
		fmt.Fprintf(stderr, "unknown export format %q (want json or text)\n", format)
		return 2
	}
	return 0
}

// attachmentsNote names a message's stored attachments for the text
// transcript: " [image image/jpeg 48213 bytes]".
func attachmentsNote(stored string) string {
	var atts []agent.Attachment
	if stored == "" || json.Unmarshal([]byte(stored), &atts) != nil {
		return ""
	}
	var b strings.Builder
	for _, a := range atts {
		kind := a.Kind
		if a.Type != "" {
			kind = a.Type
		}
		fmt.Fprintf(&b, " [%s", kind)
		for _, s := range []string{a.Name, a.Mime} {
			if s != "" {
				b.WriteString(" " + s)
			}
		}
		if a.Size > 0 {
			fmt.Fprintf(&b, " %d bytes", a.Size)
		}
		b.WriteString("]")
	}
	return b.String()
}
