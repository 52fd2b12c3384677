package store

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/query"
)

// TestUsageReportSortsPagesAndSums: a report of stored tallies sorted by
// a key or a sum either way, paged, and summed over all its rows.
func TestUsageReportSortsPagesAndSums(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		tallies := []ledger.UsageDay{
			{UserKey: "websocket:ann", Day: "2026-03-01", Model: "small", Channel: "websocket", PromptTokens: 10, CompletionTokens: 5, Cost: 0.015, Turns: 1},
			{UserKey: "websocket:ann", Day: "2026-03-02", Model: "large", Channel: "websocket", PromptTokens: 100, CompletionTokens: 50, Cost: 0.9, Turns: 2},
			{UserKey: "websocket:bob", Day: "2026-03-01", Model: "small", Channel: "websocket", PromptTokens: 30, CompletionTokens: 7, Cost: 0.037, Turns: 3},
			{UserKey: "telegram:dm:7", Day: "2026-03-03", Model: "small", Channel: "telegram", PromptTokens: 1, CompletionTokens: 1, Cost: 0.002, Turns: 1},
		}
		if err := db.Gorm().Create(&tallies).Error; err != nil {
			t.Fatal(err)
		}
		keys := func(f UsageFilter) string {
			t.Helper()
			rows, err := db.UsageReport(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, r := range rows {
				var parts []string
				for _, k := range []string{r.User, r.Day, r.Model} {
					if k != "" {
						parts = append(parts, k)
					}
				}
				out = append(out, strings.Join(parts, "/")+fmt.Sprintf("=%d", r.Turns))
			}
			return strings.Join(out, " ")
		}
		for _, tc := range []struct {
			f    UsageFilter
			want string
		}{
			{UsageFilter{By: []string{"user"}}, "telegram:dm:7=1 websocket:ann=3 websocket:bob=3"},
			{UsageFilter{By: []string{"user"}, Sort: "user", Desc: true}, "websocket:bob=3 websocket:ann=3 telegram:dm:7=1"},
			{UsageFilter{By: []string{"user"}, Sort: "cost", Desc: true}, "websocket:ann=3 websocket:bob=3 telegram:dm:7=1"},
			{UsageFilter{By: []string{"user"}, Sort: "cost"}, "telegram:dm:7=1 websocket:bob=3 websocket:ann=3"},
			// A tie on turns is ordered by the groups.
			{UsageFilter{By: []string{"user"}, Sort: "turns", Desc: true}, "websocket:ann=3 websocket:bob=3 telegram:dm:7=1"},
			{UsageFilter{By: []string{"day", "user"}, Sort: "prompt_tokens", Desc: true, Limit: 2}, "websocket:ann/2026-03-02=2 websocket:bob/2026-03-01=3"},
			{UsageFilter{By: []string{"day", "user"}, Sort: "prompt_tokens", Desc: true, Limit: 2, Offset: 2}, "websocket:ann/2026-03-01=1 telegram:dm:7/2026-03-03=1"},
			{UsageFilter{By: []string{"model"}, Since: "2026-03-02"}, "large=2 small=1"},
			{UsageFilter{By: []string{"day"}, Until: "2026-03-01", Channel: "websocket"}, "2026-03-01=4"},
			{UsageFilter{By: []string{"user", "model"}, User: "websocket:ann", Model: "small"}, "websocket:ann/small=1"},
			{UsageFilter{}, "=7"},
		} {
			if got := keys(tc.f); got != tc.want {
				t.Errorf("%+v: %s, want %s", tc.f, got, tc.want)
			}
		}

		sum, err := db.UsageSummary(ctx, UsageFilter{By: []string{"user", "day"}, Since: "2026-03-01", Until: "2026-03-02", Limit: 1, Offset: 1, Sort: "cost"})
		if err != nil {
			t.Fatal(err)
		}
		if sum.Rows != 3 || sum.PromptTokens != 140 || sum.CompletionTokens != 62 || sum.Turns != 6 || math.Abs(sum.Cost-0.952) > 1e-9 {
			t.Fatalf("summary %+v, want 3 rows of 140+62 tokens, 0.952 and 6 turns", sum)
		}
		none, err := db.UsageSummary(ctx, UsageFilter{By: []string{"user"}, User: "nobody"})
		if err != nil || none.Rows != 0 || none.Turns != 0 {
			t.Fatalf("summary of nothing: %+v %v", none, err)
		}
	})
}

// TestUsageGroupsHaveColumns: every group query.UsageFilter.Validate
// lets through has its column in the store's report, and no other does.
func TestUsageGroupsHaveColumns(t *testing.T) {
	for _, g := range query.UsageGroups {
		if usageGroups[g] == "" {
			t.Errorf("group %q has no column in usageGroups", g)
		}
	}
	if len(usageGroups) != len(query.UsageGroups) {
		t.Errorf("usageGroups has %d columns, query.UsageGroups %d groups", len(usageGroups), len(query.UsageGroups))
	}
}
