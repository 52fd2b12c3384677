package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/chatgate/chatgate/admin"
	"github.com/chatgate/chatgate/config"
	"github.com/chatgate/chatgate/sessions/query"
)

// usageCmd prints the usage report of the admin API's GET
// /admin/api/usage — tokens and cost by user, day and model — read from
// the database the configuration names, as an aligned table or as CSV.
// It can run while the gateway does.
func usageCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, path := configFlag("usage", stderr)
	since := fs.String("since", "", "from this `DAY` on: YYYY-MM-DD, or Nd for the last N days with today (7d)")
	until := fs.String("until", "", "up to this `DAY`, included: YYYY-MM-DD or Nd (1d is today)")
	user := fs.String("user", "", "only this user `KEY` (a session key without its Telegram topic)")
	channel := fs.String("channel", "", "only this `CHANNEL` (websocket, telegram)")
	model := fs.String("model", "", "only this `MODEL`")
	by := fs.String("by", strings.Join(admin.DefaultUsageBy, ","), "group by `GROUPS`: any of user, day, model and channel, comma-separated; \"\" for one row of everything")
	sortCol := fs.String("sort", "", "order by `COLUMN`: a group, prompt_tokens, completion_tokens, cost, turns or estimated_tokens (default: the groups)")
	order := fs.String("order", "", "asc or desc (default: asc for a group, desc for a sum)")
	limit := fs.Int("limit", 0, "print the first `N` rows only (0: all); the totals stay the whole report's")
	asCSV := fs.Bool("csv", false, "print CSV, as the admin API's format=csv, instead of a table")
	cfg, code := parseConfig(fs, path, args, stderr)
	if cfg == nil {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gateway usage: unexpected argument %q (flags come first; see gateway usage -h)\n", fs.Arg(0))
		return 2
	}
	today := time.Now().In(usageLocation(cfg, *channel))
	f := query.UsageFilter{User: *user, Channel: *channel, Model: *model, By: admin.ParseUsageBy(*by), Sort: *sortCol, Limit: *limit}
	var err error
	if f.Since, err = relativeDay("since", *since, today); err == nil {
		f.Until, err = relativeDay("until", *until, today)
	}
	if err == nil {
		err = admin.SetUsageOrder(&f, *order)
	}
	if err == nil {
		err = f.Validate()
	}
	if err != nil {
		fmt.Fprintf(stderr, "gateway usage: -%v\n", err)
		return 2
	}

	db, err := openStore(ctx, cfg, commandLog(stderr))
	if err != nil {
		fmt.Fprintf(stderr, "%s: storage: %v\n", cfg.File, err)
		return 1
	}
	defer db.Close()
	return report(ctx, db, f, *asCSV, stdout, stderr)
}

// report prints the usage report f selects, as a table or as CSV.
func report(ctx context.Context, q query.UsageReports, f query.UsageFilter, asCSV bool, stdout, stderr io.Writer) int {
	rows, err := q.UsageReport(ctx, f)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if asCSV {
		if err := admin.WriteUsageCSV(stdout, f.By, rows); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		return 0
	}
	sum, err := q.UsageSummary(ctx, f)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if len(rows) == 0 {
		fmt.Fprintln(stdout, "no usage recorded for this selection")
		return 0
	}
	printUsage(stdout, f.By, rows, sum)
	return 0
}

// usageLocation is the zone whose today relative days count from: the
// channel's reset time zone with -channel, else session.reset.timezone.
func usageLocation(cfg *config.Config, channel string) *time.Location {
	if channel == config.ChannelWebSocket || channel == config.ChannelTelegram {
		return cfg.Policy(channel).Location()
	}
	if tz := cfg.Session.Reset.Timezone; tz != nil {
		if loc, err := time.LoadLocation(*tz); err == nil {
			return loc
		}
	}
	return time.UTC
}

// relativeDay reads a day flag: YYYY-MM-DD as it is, Nd as the day N−1
// days before today (1d is today, 7d six days ago: -since 7d is the last
// seven days).
func relativeDay(name, s string, today time.Time) (string, error) {
	if s == "" {
		return "", nil
	}
	if n, ok := strings.CutSuffix(s, "d"); ok {
		k, err := strconv.Atoi(n)
		if err != nil || k < 1 || k > 100_000 {
			return "", fmt.Errorf("%s: want a day as YYYY-MM-DD or a number of days such as 7d (1d is today), got %q", name, s)
		}
		return time.Date(today.Year(), today.Month(), today.Day()-(k-1), 0, 0, 0, 0, time.UTC).Format(time.DateOnly), nil
	}
	if _, err := time.Parse(time.DateOnly, s); err != nil {
		return "", fmt.Errorf("%s: want a day as YYYY-MM-DD or a number of days such as 7d (1d is today), got %q", name, s)
	}
	return s, nil
}

// printUsage prints a report as a table: keys to the left, sums to the
// right, and a totals line of the whole report when it is grouped.
func printUsage(w io.Writer, by []string, rows []query.UsageRow, sum query.UsageSummary) {
	head := admin.UsageColumns(by)
	for i, c := range head {
		head[i] = strings.ToUpper(strings.ReplaceAll(c, "_", " "))
	}
	lines := [][]string{head}
	for _, r := range rows {
		lines = append(lines, admin.UsageCells(by, r))
	}
	if len(by) > 0 {
		total := make([]string, len(by))
		total[0] = "TOTAL"
		if int64(len(rows)) < sum.Rows {
			total[0] = fmt.Sprintf("TOTAL (all %d rows)", sum.Rows)
		}
		lines = append(lines, append(total, admin.UsageCells(nil, query.UsageRow{UsageTotals: sum.UsageTotals})...))
	}
	widths := make([]int, len(head))
	for _, l := range lines {
		for i, c := range l {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	for _, l := range lines {
		var b strings.Builder
		for i, c := range l {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			switch {
			case i < len(by): // a key: to the left
				b.WriteString(c)
				if i < len(l)-1 {
					b.WriteString(pad + "  ")
				}
			default: // a sum: to the right
				b.WriteString(pad + c)
				if i < len(l)-1 {
					b.WriteString("  ")
				}
			}
		}
		fmt.Fprintln(w, b.String())
	}
}
