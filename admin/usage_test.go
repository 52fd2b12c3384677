package admin

import (
	"encoding/csv"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/sessions/store"
	"github.com/chatgate/chatgate/sessions/storetest"
)

// usageAnswer is the answer of GET /admin/api/usage.
type usageAnswer struct {
	By         []string         `json:"by"`
	Sort       string           `json:"sort"`
	Order      string           `json:"order"`
	Rows       []store.UsageRow `json:"rows"`
	Totals     map[string]any   `json:"totals"`
	TotalRows  int64            `json:"total_rows"`
	Limit      int              `json:"limit"`
	NextOffset *int             `json:"next_offset"`
}

// line is a row as "key/key=prompt+completion cost turns".
func line(r store.UsageRow) string {
	var keys []string
	for _, k := range []string{r.User, r.Day, r.Model, r.Channel} {
		if k != "" {
			keys = append(keys, k)
		}
	}
	return fmt.Sprintf("%s=%d+%d %v %d", strings.Join(keys, "/"), r.PromptTokens, r.CompletionTokens, r.Cost, r.Turns)
}

// usageTurns answers five turns over two days (the manager on the env's
// clock, 2026-03-01 12:00 UTC): on the first ann twice, one of them with
// the large model, and Telegram user 9 in a forum topic; on the second
// bob with the large model and user 9 in their chat.
func usageTurns(e *env) {
	e.turn("websocket", "websocket:ann", "ann", "hello")                // 5+7, 0.012
	e.turn("websocket", "websocket:ann", "ann", "m:large tell me more") // 20+7, 0.027
	e.turn("telegram", "telegram:dm:9:topic:3", "9", "hi")              // 2+7, 0.009 for telegram:dm:9
	e.clock.Advance(24 * time.Hour)
	e.turn("websocket", "websocket:bob", "bob", "m:large a long question here") // 28+7, 0.035
	e.turn("telegram", "telegram:dm:9", "9", "hey")                             // 3+7, 0.010
}

// TestUsageReport: the report of turns the manager ran, on each database:
// grouped, filtered, sorted, paged, its totals; bad parameters get 400.
func TestUsageReport(t *testing.T) {
	storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
		e := newEnvWith(t, &llmtest.Spender{}, envOptions{db: open(), managerClock: true})
		usageTurns(e)
		report := func(query string) usageAnswer {
			t.Helper()
			var a usageAnswer
			e.call("GET", "/admin/api/usage?"+query, 200, &a)
			return a
		}
		lines := func(a usageAnswer) string {
			var out []string
			for _, r := range a.Rows {
				out = append(out, line(r))
			}
			return strings.Join(out, "; ")
		}

		// By default: the tallies as kept, by user, day and model.
		all := report("")
		if fmt.Sprint(all.By) != "[user day model]" || all.TotalRows != 5 || all.Limit != 100 || all.NextOffset != nil || all.Order != "asc" {
			t.Fatalf("default report: %+v", all)
		}
		want := "telegram:dm:9/2026-03-01/small=2+7 0.009 1; telegram:dm:9/2026-03-02/small=3+7 0.01 1; " +
			"websocket:ann/2026-03-01/large=20+7 0.027 1; websocket:ann/2026-03-01/small=5+7 0.012 1; websocket:bob/2026-03-02/large=28+7 0.035 1"
		if got := lines(all); got != want {
			t.Fatalf("default report:\n got %s\nwant %s", got, want)
		}
		if fmt.Sprint(all.Totals) != "map[completion_tokens:35 cost:0.093 estimated_tokens:0 prompt_tokens:58 turns:5]" {
			t.Fatalf("totals %v", all.Totals)
		}

		for query, want := range map[string]string{
			"by=user&sort=cost":                         "websocket:ann=25+14 0.039 2; websocket:bob=28+7 0.035 1; telegram:dm:9=5+14 0.019 2",
			"by=user&sort=cost&order=asc":               "telegram:dm:9=5+14 0.019 2; websocket:bob=28+7 0.035 1; websocket:ann=25+14 0.039 2",
			"by=user&order=desc":                        "websocket:bob=28+7 0.035 1; websocket:ann=25+14 0.039 2; telegram:dm:9=5+14 0.019 2",
			"by=model":                                  "large=48+14 0.062 2; small=10+21 0.031 3",
			"by=model,channel":                          "large/websocket=48+14 0.062 2; small/telegram=5+14 0.019 2; small/websocket=5+7 0.012 1",
			"by=user&since=2026-03-02":                  "telegram:dm:9=3+7 0.01 1; websocket:bob=28+7 0.035 1",
			"by=day&until=2026-03-01&channel=websocket": "2026-03-01=25+14 0.039 2",
			"by=day&user=telegram:dm:9":                 "2026-03-01=2+7 0.009 1; 2026-03-02=3+7 0.01 1",
			"by=user&model=large&sort=prompt_tokens":    "websocket:bob=28+7 0.035 1; websocket:ann=20+7 0.027 1",
			"by=day&sort=turns&order=asc":               "2026-03-02=31+14 0.045 2; 2026-03-01=27+21 0.048 3",
			"by=":                                       "=58+35 0.093 5",
			"by=user&user=nobody":                       "",
		} {
			if got := lines(report(query)); got != want {
				t.Errorf("%s:\n got %s\nwant %s", query, got, want)
			}
		}

		// Pages: total_rows and the totals are the whole report's.
		p1 := report("by=user&sort=cost&limit=2")
		if lines(p1) != "websocket:ann=25+14 0.039 2; websocket:bob=28+7 0.035 1" || p1.TotalRows != 3 || p1.NextOffset == nil || *p1.NextOffset != 2 || p1.Totals["turns"] != 5.0 {
			t.Fatalf("page 1: %+v", p1)
		}
		p2 := report("by=user&sort=cost&limit=2&offset=2")
		if lines(p2) != "telegram:dm:9=5+14 0.019 2" || p2.NextOffset != nil {
			t.Fatalf("page 2: %+v", p2)
		}

		for bad, msg := range map[string]string{
			"by=user,week":                       `by: cannot group by "week"`,
			"by=user,user":                       "by: user named twice",
			"since=2026-3-1":                     `since: want a day as YYYY-MM-DD, got "2026-3-1"`,
			"until=yesterday":                    `until: want a day as YYYY-MM-DD`,
			"since=2026-03-02&until=2026-03-01":  "since (2026-03-02) is after until (2026-03-01)",
			"by=user&sort=day":                   `sort: "day" is not a column of this report`,
			"sort=cost%3B+DROP+TABLE+usage_days": `sort: "cost; DROP TABLE usage_days"`,
			"order=up":                           `order: want asc or desc, got "up"`,
			"format=xml":                         `format: want json or csv, got "xml"`,
			"limit=0":                            "limit: want a whole number from 1 to 10000",
			"limit=x":                            "limit: want a whole number",
			"limit=10001":                        "limit: want a whole number from 0 to 10000",
			"offset=-1":                          "offset: want a whole number",
			"format=csv&limit=100001":            "limit: want a whole number from 0 to 100000",
		} {
			code, _, body := e.do("GET", "/admin/api/usage?"+bad, aliceToken)
			if code != http.StatusBadRequest || !strings.Contains(string(body), `"error": "`+strings.ReplaceAll(msg, `"`, `\"`)) {
				t.Errorf("%s: %d %s, want 400 with %q", bad, code, body, msg)
			}
		}
	})
}

// TestUsageCSV: the report as a CSV download — a header row of its
// columns, a line per row in the report's order, no totals line — and
// the same with a page.
func TestUsageCSV(t *testing.T) {
	e := newEnvWith(t, &llmtest.Spender{}, envOptions{managerClock: true})
	usageTurns(e)
	csvOf := func(query, wantName string) [][]string {
		t.Helper()
		code, h, body := e.do("GET", "/admin/api/usage?"+query, aliceToken)
		if code != 200 || h.Get("Content-Type") != "text/csv; charset=utf-8" || h.Get("Content-Disposition") != `attachment; filename="`+wantName+`"` {
			t.Fatalf("%s: %d %q %q: %s", query, code, h.Get("Content-Type"), h.Get("Content-Disposition"), body)
		}
		recs, err := csv.NewReader(strings.NewReader(string(body))).ReadAll()
		if err != nil {
			t.Fatalf("%s: not CSV: %v\n%s", query, err, body)
		}
		return recs
	}
	recs := csvOf("format=csv", "usage.csv")
	want := [][]string{
		{"user", "day", "model", "prompt_tokens", "completion_tokens", "cost", "turns", "estimated_tokens"},
		{"telegram:dm:9", "2026-03-01", "small", "2", "7", "0.009", "1", "0"},
		{"telegram:dm:9", "2026-03-02", "small", "3", "7", "0.01", "1", "0"},
		{"websocket:ann", "2026-03-01", "large", "20", "7", "0.027", "1", "0"},
		{"websocket:ann", "2026-03-01", "small", "5", "7", "0.012", "1", "0"},
		{"websocket:bob", "2026-03-02", "large", "28", "7", "0.035", "1", "0"},
	}
	if fmt.Sprint(recs) != fmt.Sprint(want) {
		t.Fatalf("CSV:\n got %q\nwant %q", recs, want)
	}
	recs = csvOf("format=csv&by=user,channel&sort=cost&since=2026-03-01&until=2026-03-02", "usage-from-2026-03-01-to-2026-03-02.csv")
	want = [][]string{
		{"user", "channel", "prompt_tokens", "completion_tokens", "cost", "turns", "estimated_tokens"},
		{"websocket:ann", "websocket", "25", "14", "0.039", "2", "0"},
		{"websocket:bob", "websocket", "28", "7", "0.035", "1", "0"},
		{"telegram:dm:9", "telegram", "5", "14", "0.019", "2", "0"},
	}
	if fmt.Sprint(recs) != fmt.Sprint(want) {
		t.Fatalf("CSV by user and channel, by cost:\n got %q\nwant %q", recs, want)
	}
	// A page of it, as asked.
	recs = csvOf("format=csv&by=user&sort=cost&limit=1&offset=1", "usage.csv")
	if fmt.Sprint(recs) != fmt.Sprint([][]string{{"user", "prompt_tokens", "completion_tokens", "cost", "turns", "estimated_tokens"}, {"websocket:bob", "28", "7", "0.035", "1", "0"}}) {
		t.Fatalf("CSV page: %q", recs)
	}
	// Nothing to report: the header alone.
	recs = csvOf("format=csv&by=day&user=nobody", "usage.csv")
	if fmt.Sprint(recs) != "[[day prompt_tokens completion_tokens cost turns estimated_tokens]]" {
		t.Fatalf("empty CSV: %q", recs)
	}
}

func TestFormatCost(t *testing.T) {
	for c, want := range map[float64]string{0: "0", 12: "12", 0.036000000000000004: "0.036", 1.53e-7: "0.000000153", 1e-10: "0", 2.5: "2.5"} {
		if got := FormatCost(c); got != want {
			t.Errorf("FormatCost(%v) = %q, want %q", c, got, want)
		}
	}
}
