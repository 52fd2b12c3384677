package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/query"
)

// sessionsCmd reads and resets stored conversations. It opens the same
// database as the gateway and can run while the gateway does; each
// subcommand reads and writes through the roles of the query port it
// needs (package query), purge through a session manager of its own.
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
	format := fs.String("format", "json", "json, text or markdown (export)")
	cfg, code := parseConfig(fs, path, args, stderr)
	if cfg == nil {
		return code
	}
	db, err := openStore(ctx, cfg, commandLog(stderr))
	if err != nil {
		fmt.Fprintf(stderr, "%s: storage: %v\n", cfg.File, err)
		return 1
	}
	defer db.Close()
	// A reset here records its conversation's extraction as the
	// gateway's would; a running gateway makes it.
	pols := policies(cfg)
	db.ExtractAtArchive(sessions.ExtractionUser(func(channel string) sessions.Policy { return pols[channel] }))

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
		return list(ctx, db, query.ListFilter{SessionKey: *key, Status: *status, Limit: *limit}, stdout, stderr)
	case "show":
		if !needArg("a conversation id or session key") {
			return 2
		}
		return show(ctx, db, arg, stdout, stderr)
	case "export":
		if !needArg("a conversation id") {
			return 2
		}
		return export(ctx, db, arg, *format, stdout, stderr)
	case "reset":
		if !needArg("a session key") {
			return 2
		}
		return reset(ctx, db, arg, stdout, stderr)
	case "purge":
		return purge(ctx, cfg, db, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "gateway sessions: unknown subcommand %q\n", sub)
		return 2
	}
}

// list prints the conversations f selects.
func list(ctx context.Context, q query.Conversations, f query.ListFilter, stdout, stderr io.Writer) int {
	convs, err := q.ListConversations(ctx, f)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	printConversations(stdout, convs)
	return 0
}

// reset archives key's active conversation.
func reset(ctx context.Context, q query.Resets, key string, stdout, stderr io.Writer) int {
	conv, err := q.ResetKey(ctx, key, time.Now().UTC())
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if conv == nil {
		fmt.Fprintf(stdout, "%s has no active conversation\n", key)
		return 0
	}
	fmt.Fprintf(stdout, "archived %s (%d messages); the next message from %s starts a new conversation\n", conv.ID, conv.LastSeq, key)
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

// transcripts are the roles of the query port that show reads through.
type transcripts interface {
	query.Conversations
	query.Exports
}

// show prints a conversation, by its id, or a session key's
// conversations and the newest one's transcript.
func show(ctx context.Context, q transcripts, arg string, stdout, stderr io.Writer) int {
	conv, err := q.Conversation(ctx, arg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if conv == nil {
		convs, err := q.ListConversations(ctx, query.ListFilter{SessionKey: arg, Limit: 1000})
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
	return export(ctx, q, conv.ID, "text", stdout, stderr)
}

// export writes a conversation's transcript in a format (query.Export.Write).
func export(ctx context.Context, q query.Exports, id, format string, stdout, stderr io.Writer) int {
	switch format {
	case query.FormatJSON, query.FormatText, query.FormatMarkdown:
	default:
		fmt.Fprintf(stderr, "unknown export format %q (want json, text or markdown)\n", format)
		return 2
	}
	t, err := q.ExportConversation(ctx, id)
	if err == nil && t == nil {
		err = fmt.Errorf("no conversation %q", id)
	}
	if err == nil {
		err = t.Write(stdout, format)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}
