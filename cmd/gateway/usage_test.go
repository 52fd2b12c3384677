package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// spend runs turns with the spender on the SQLite database at dbPath,
// on a clock at now (nil: the real one).
func spend(t *testing.T, dbPath string, now func() time.Time, ins ...sessions.Inbound) {
	t.Helper()
	db, err := store.Open(context.Background(), "sqlite", dbPath, store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := sessions.New(db, &llmtest.Spender{}, sessions.Options{Now: now})
	for _, in := range ins {
		if _, err := m.Handle(context.Background(), in, sessions.Hooks{}); err != nil {
			t.Fatal(err)
		}
	}
	m.Shutdown(context.Background())
	db.Close()
}

func inbound(channel, key, text string) sessions.Inbound {
	return sessions.Inbound{Channel: channel, SessionKey: key, Text: text}
}

// TestUsageCommand runs the built binary's `gateway usage` on a database
// with turns on 1 and 2 March 2026 and one today: the table, its totals,
// CSV, filters, relative days and bad flags.
func TestUsageCommand(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "g.db")
	cfg := writeConfig(t, fmt.Sprintf("storage:\n  dsn: %s\n", dbPath))
	clock := clocktest.New(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	spend(t, dbPath, clock.Now,
		inbound("websocket", "websocket:ann", "hello"),                // 5+7, 0.012
		inbound("websocket", "websocket:ann", "m:large tell me more"), // 20+7, 0.027
		inbound("telegram", "telegram:dm:9:topic:3", "hi"))            // 2+7, 0.009 for telegram:dm:9
	clock.Advance(24 * time.Hour)
	spend(t, dbPath, clock.Now, inbound("websocket", "websocket:bob", "m:large a long question here")) // 28+7, 0.035
	spend(t, dbPath, nil, inbound("websocket", "websocket:cid", "today"))                              // 5+7, 0.012
	today := time.Now().UTC().Format(time.DateOnly)

	gateway := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("gateway %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
		}
		return string(out)
	}

	// The default report: by user, day and model, a totals line.
	var rows []string
	for _, l := range strings.Split(strings.TrimSpace(gateway("usage", "-c", cfg)), "\n") {
		rows = append(rows, strings.Join(strings.Fields(l), " "))
	}
	want := []string{
		"USER DAY MODEL PROMPT TOKENS COMPLETION TOKENS COST TURNS ESTIMATED TOKENS",
		"telegram:dm:9 2026-03-01 small 2 7 0.009 1 0",
		"websocket:ann 2026-03-01 large 20 7 0.027 1 0",
		"websocket:ann 2026-03-01 small 5 7 0.012 1 0",
		"websocket:bob 2026-03-02 large 28 7 0.035 1 0",
		"websocket:cid " + today + " small 5 7 0.012 1 0",
		"TOTAL 60 35 0.095 5 0",
	}
	if strings.Join(rows, "\n") != strings.Join(want, "\n") {
		t.Fatalf("gateway usage:\n%s\nwant (spacing aside):\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}

	// Aligned: keys to the left, sums to the right.
	got := gateway("usage", "-c", cfg, "-by", "user", "-sort", "cost", "-until", "2026-03-02")
	wantTable := "" +
		"USER           PROMPT TOKENS  COMPLETION TOKENS   COST  TURNS  ESTIMATED TOKENS\n" +
		"websocket:ann             25                 14  0.039      2                 0\n" +
		"websocket:bob             28                  7  0.035      1                 0\n" +
		"telegram:dm:9              2                  7  0.009      1                 0\n" +
		"TOTAL                     55                 28  0.083      4                 0\n"
	if got != wantTable {
		t.Fatalf("gateway usage -by user -sort cost -until 2026-03-02:\n%s\nwant:\n%s", got, wantTable)
	}

	// CSV, the admin API's: the same columns, no totals line.
	got = gateway("usage", "-c", cfg, "-by", "model,channel", "-since", "2026-03-02", "-csv")
	wantCSV := "model,channel,prompt_tokens,completion_tokens,cost,turns,estimated_tokens\n" +
		"large,websocket,28,7,0.035,1,0\n" +
		"small,websocket,5,7,0.012,1,0\n"
	if got != wantCSV {
		t.Fatalf("gateway usage -csv:\n%s\nwant:\n%s", got, wantCSV)
	}

	// The last 7 days (today included) hold today's turn alone; a page
	// of the report keeps the totals of all of it.
	if got := gateway("usage", "-c", cfg, "-since", "7d", "-by", "user"); !strings.Contains(got, "websocket:cid") || strings.Contains(got, "websocket:ann") {
		t.Fatalf("gateway usage -since 7d:\n%s", got)
	}
	got = gateway("usage", "-c", cfg, "-by", "user", "-sort", "prompt_tokens", "-limit", "1")
	if l := strings.Split(strings.TrimSpace(got), "\n"); len(l) != 3 || !strings.HasPrefix(l[1], "websocket:bob ") || !strings.HasPrefix(l[2], "TOTAL (all 4 rows) ") || !strings.Contains(l[2], " 0.095 ") {
		t.Fatalf("gateway usage -limit 1:\n%s", got)
	}
	if got := gateway("usage", "-c", cfg, "-user", "websocket:nobody"); got != "no usage recorded for this selection\n" {
		t.Fatalf("gateway usage for nobody: %q", got)
	}
	if got := gateway("usage", "-c", cfg, "-by", "", "-channel", "telegram"); strings.Join(strings.Fields(got), " ") != "PROMPT TOKENS COMPLETION TOKENS COST TURNS ESTIMATED TOKENS 2 7 0.009 1 0" {
		t.Fatalf("gateway usage -by '' -channel telegram:\n%s", got)
	}
}

func TestUsageCommandRefusesBadFlags(t *testing.T) {
	cfg := writeConfig(t, fmt.Sprintf("storage:\n  dsn: %s\n", filepath.Join(t.TempDir(), "g.db")))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-by", "user,week"}, `gateway usage: -by: cannot group by "week" (want any of user, day, model, channel)`},
		{[]string{"-since", "yesterday"}, `gateway usage: -since: want a day as YYYY-MM-DD or a number of days such as 7d (1d is today), got "yesterday"`},
		{[]string{"-until", "0d"}, `gateway usage: -until: want a day as YYYY-MM-DD`},
		{[]string{"-since", "2026-03-02", "-until", "2026-03-01"}, "gateway usage: -since (2026-03-02) is after until (2026-03-01)"},
		{[]string{"-by", "user", "-sort", "model"}, `gateway usage: -sort: "model" is not a column of this report`},
		{[]string{"-order", "up"}, `gateway usage: -order: want asc or desc, got "up"`},
		{[]string{"extra"}, `gateway usage: unexpected argument "extra"`},
	} {
		code, out, errOut := runCmd(t, append([]string{"usage", "-c", cfg}, tc.args...)...)
		if code != 2 || out != "" || !strings.HasPrefix(errOut, tc.want) {
			t.Errorf("gateway usage %s = %d %q %q, want 2 and %q", strings.Join(tc.args, " "), code, out, errOut, tc.want)
		}
	}
}

func TestRelativeDay(t *testing.T) {
	today := time.Date(2026, 3, 2, 23, 30, 0, 0, time.FixedZone("UTC+5", 5*3600))
	for in, want := range map[string]string{
		"":           "",
		"1d":         "2026-03-02",
		"2d":         "2026-03-01",
		"7d":         "2026-02-24",
		"366d":       "2025-03-02",
		"2026-01-31": "2026-01-31",
		"0d":         "error",
		"-3d":        "error",
		"d":          "error",
		"7days":      "error",
		"2026-02-30": "error",
		"2026-3-1":   "error",
	} {
		got, err := relativeDay("since", in, today)
		if err != nil {
			got = "error"
		}
		if got != want {
			t.Errorf("relativeDay(%q) = %q (%v), want %q", in, got, err, want)
		}
	}
}
