package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
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
	format := fs.String("format", "json", "json, text or markdown (export)")
	cfg, code := parseConfig(fs, path, args, stderr)
	if cfg == nil {
		return code
	}
	db, err := openStore(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Fprintf(stderr, "%s: storage: %v\n", cfg.File, err)
		return 1
	}
	defer db.Close()

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
		convs, err := db.ListConversations(ctx, store.ListFilter{SessionKey: *key, Status: *status, Limit: *limit})
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		printConversations(stdout, convs)
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
		conv, err := db.ResetKey(ctx, arg, time.Now().UTC())
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
		return purge(ctx, cfg, db, stdout, stderr)
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

func show(ctx context.Context, db *store.DB, arg string, stdout, stderr io.Writer) int {
	conv, err := db.Conversation(ctx, arg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if conv == nil {
		convs, err := db.ListConversations(ctx, store.ListFilter{SessionKey: arg, Limit: 1000})
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
	return export(ctx, db, conv.ID, "text", stdout, stderr)
}

func export(ctx context.Context, db *store.DB, id, format string, stdout, stderr io.Writer) int {
	switch format {
	case store.FormatJSON, store.FormatText, store.FormatMarkdown:
	default:
		fmt.Fprintf(stderr, "unknown export format %q (want json, text or markdown)\n", format)
		return 2
	}
	t, err := db.ExportConversation(ctx, id)
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
