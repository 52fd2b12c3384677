package query

import (
	"strings"
	"testing"
)

func TestUsageFilterValidate(t *testing.T) {
	for _, tc := range []struct {
		f    UsageFilter
		want string // "" for valid
	}{
		{UsageFilter{}, ""},
		{UsageFilter{By: []string{"user", "day", "model", "channel"}, Sort: "channel", Since: "2026-01-01", Until: "2026-01-01"}, ""},
		{UsageFilter{By: []string{"user"}, Sort: "cost"}, ""},
		{UsageFilter{By: []string{"week"}}, `by: cannot group by "week" (want any of user, day, model, channel)`},
		{UsageFilter{By: []string{"user", "user"}}, "by: user named twice"},
		{UsageFilter{Since: "2026-1-2"}, `since: want a day as YYYY-MM-DD, got "2026-1-2"`},
		{UsageFilter{Until: "tomorrow"}, `until: want a day as YYYY-MM-DD, got "tomorrow"`},
		{UsageFilter{Since: "2026-02-01", Until: "2026-01-31"}, "since (2026-02-01) is after until (2026-01-31)"},
		{UsageFilter{By: []string{"user"}, Sort: "day"}, `sort: "day" is not a column of this report (want one of user, prompt_tokens, completion_tokens, cost, turns, estimated_tokens)`},
		{UsageFilter{Sort: "cost; DROP TABLE usage_days"}, `sort: "cost; DROP TABLE usage_days" is not a column`},
		{UsageFilter{Limit: -1}, "limit and offset"},
	} {
		err := tc.f.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v, want valid", tc.f, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want %q", tc.f, err, tc.want)
		}
	}
}
