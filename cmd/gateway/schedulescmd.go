package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/chatgate/chatgate/admin"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/query"
)

// schedulesCmd prints the operator's schedules of bot.yaml — when each
// fires in its time zone, its target, misfire rule and quiet — with its
// next due times, computed from the configuration, and its latest fires,
// read from the database as the admin API's GET /admin/api/schedules
// reads them; and the reminders users keep. `schedules fires NAME` lists
// one schedule's fires. It can run while the gateway does.
func schedulesCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	sub, name := "list", ""
	if len(args) > 0 && args[0] == "fires" {
		sub, args = "fires", args[1:]
		// The name may come before the flags: gateway schedules fires NAME -limit 5.
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			name, args = args[0], args[1:]
		}
	}
	fsName := "schedules"
	if sub == "fires" {
		fsName = "schedules fires"
	}
	fs, path := configFlag(fsName, stderr)
	asJSON := fs.Bool("json", false, "print JSON, as the admin API answers, instead of text")
	last := fs.Int("last", admin.DefaultLastFires, "show each schedule's last `N` fires (list)")
	limit := fs.Int("limit", 20, "show the last `N` fires (fires)")
	cfg, code := parseConfig(fs, path, args, stderr)
	if cfg == nil {
		return code
	}
	rest := fs.Args()
	if sub == "fires" && name == "" && len(rest) > 0 {
		name, rest = rest[0], rest[1:]
	}
	if sub == "fires" && name == "" {
		fmt.Fprintln(stderr, "gateway schedules fires: missing the schedule's name")
		return 2
	}
	if len(rest) > 0 {
		fmt.Fprintf(stderr, "gateway schedules: unexpected argument %q (see gateway schedules -h)\n", rest[0])
		return 2
	}
	if *last < 0 || *last > 100 || *limit < 1 || *limit > 1000 {
		fmt.Fprintln(stderr, "gateway schedules: -last wants 0 to 100, -limit 1 to 1000")
		return 2
	}
	db, err := openStore(ctx, cfg, commandLog(stderr))
	if err != nil {
		fmt.Fprintf(stderr, "%s: storage: %v\n", cfg.File, err)
		return 1
	}
	defer db.Close()
	list, err := operatorSchedules(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cfg.File, err)
		return 1
	}
	if sub == "fires" {
		return printFires(ctx, db, list, name, *limit, *asJSON, stdout, stderr)
	}
	rep, err := admin.BuildScheduleReport(ctx, db, list, time.Now(), *last)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if *asJSON {
		return writeJSONOut(stdout, stderr, rep)
	}
	printSchedules(stdout, list, rep)
	return 0
}

func writeJSONOut(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// printSchedules prints a report as text: a block per schedule, then the
// reminders. Times are shown in the schedule's zone.
func printSchedules(w io.Writer, list []sessions.OperatorSchedule, rep admin.ScheduleReport) {
	if len(rep.Schedules) == 0 {
		fmt.Fprintln(w, "no schedules in the configuration")
	}
	for i, row := range rep.Schedules {
		loc := list[i].When.Location()
		misfire := row.Misfire
		if row.MaxLate != "" {
			misfire += ", max_late " + row.MaxLate
		}
		quiet := ""
		if row.Quiet {
			quiet = ", quiet"
		}
		fmt.Fprintf(w, "%s: %s (%s) → %s; misfire %s%s\n", row.Name, row.When, row.Timezone, row.Target, misfire, quiet)
		next := make([]string, len(row.Next))
		for j, t := range row.Next {
			next[j] = t.In(loc).Format("Mon 2 Jan 2006 15:04 MST")
		}
		if len(next) == 0 {
			next = []string{"none"}
		}
		fmt.Fprintf(w, "  next  %s\n", strings.Join(next, ", "))
		if len(row.Last) == 0 {
			fmt.Fprintf(w, "  last  no fire stored\n")
		} else {
			fmt.Fprintf(w, "  last\n")
			printFireRows(w, "    ", row.Last, loc, row.AllSessions)
		}
		fmt.Fprintln(w)
	}
	rc := rep.Reminders
	switch {
	case rc.Due == 0:
		fmt.Fprintln(w, "reminders: none due")
	default:
		kept := fmt.Sprintf("%d sessions", rc.Sessions)
		if rc.Sessions == 1 {
			kept = "1 session"
		}
		fmt.Fprintf(w, "reminders: %d due, kept by %s; the next at %s\n", rc.Due, kept, rc.Next.UTC().Format(time.RFC3339))
	}
}

// printFireRows prints fires as a table, their due times in loc; with
// sessions, a column for each fire's session.
func printFireRows(w io.Writer, indent string, fires []admin.FireRow, loc *time.Location, withSession bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "DUE\tSTATE\tLAG\tDELIVERY\tREASON"
	if withSession {
		head = "DUE\tSESSION\tSTATE\tLAG\tDELIVERY\tREASON"
	}
	fmt.Fprintln(tw, indent+head)
	for _, f := range fires {
		cells := []string{f.Due.In(loc).Format("2006-01-02 15:04 MST")}
		if withSession {
			cells = append(cells, f.SessionKey)
		}
		lag := (time.Duration(f.LagMS) * time.Millisecond).Round(time.Second).String()
		cells = append(cells, f.State, lag, dash(f.DeliveryRef), dash(oneLine(f.Reason)))
		fmt.Fprintln(tw, indent+strings.Join(cells, "\t"))
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps a stored reason on one line of the table.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 80 {
		s = string(r[:79]) + "…"
	}
	return s
}

// printFires prints the latest fires of the schedule called name.
func printFires(ctx context.Context, q query.Fires, list []sessions.OperatorSchedule, name string, limit int, asJSON bool, stdout, stderr io.Writer) int {
	out, ok, err := admin.ScheduleFires(ctx, q, list, name, limit)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if !ok {
		fmt.Fprintf(stderr, "no schedule %q in the configuration, and no fires of it stored\n", name)
		return 1
	}
	if asJSON {
		return writeJSONOut(stdout, stderr, out)
	}
	loc, all := time.UTC, false
	for _, s := range list {
		if s.Name == name {
			loc, all = s.When.Location(), s.Target.AllSessions
		}
	}
	if !out.Configured {
		fmt.Fprintf(stdout, "%s is no longer in the configuration; its stored fires:\n", name)
	}
	if len(out.Fires) == 0 {
		fmt.Fprintf(stdout, "%s has no fire stored yet\n", name)
		return 0
	}
	printFireRows(stdout, "", out.Fires, loc, all || !out.Configured)
	return 0
}
