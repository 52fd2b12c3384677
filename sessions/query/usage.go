package query

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// UsageFilter selects tallies for UsageReports. Empty fields select all.
type UsageFilter struct {
	Since, Until string // days, YYYY-MM-DD, both included
	User         string // exact user key
	Channel      string
	Model        string
	// By is what the rows are grouped by, any of UsageGroups; none: one
	// row of everything.
	By []string
	// Sort is the column the rows are ordered by: one of By, or a sum
	// (UsageSums); "": by By. Desc reverses it. Rows that tie are
	// ordered by By.
	Sort string
	Desc bool
	// Limit and Offset page the rows; Limit 0 is every row.
	Limit, Offset int
}

// UsageRow is one group of a usage report: its keys (empty when not
// grouped by) and their sums.
type UsageRow struct {
	User    string `json:"user,omitempty"`
	Day     string `json:"day,omitempty"`
	Model   string `json:"model,omitempty"`
	Channel string `json:"channel,omitempty"`
	ledger.UsageTotals
}

// UsageSummary is a report's size and sums: how many rows it has
// unpaged, and the totals of all of them.
type UsageSummary struct {
	Rows int64
	ledger.UsageTotals
}

// UsageGroups are the groups of a report, in the order they are named
// in messages.
var UsageGroups = []string{"user", "day", "model", "channel"}

// UsageSums are the summed columns of a report, in its order.
var UsageSums = []string{"prompt_tokens", "completion_tokens", "cost", "turns", "estimated_tokens"}

// ValidUsageGroup reports whether a report can group by g.
func ValidUsageGroup(g string) bool { return slices.Contains(UsageGroups, g) }

// Validate says what is wrong with f, naming the field as the admin API
// and the command line name it; nil when nothing is.
func (f UsageFilter) Validate() error {
	seen := map[string]bool{}
	for _, g := range f.By {
		if !ValidUsageGroup(g) {
			return fmt.Errorf("by: cannot group by %q (want any of %s)", g, strings.Join(UsageGroups, ", "))
		}
		if seen[g] {
			return fmt.Errorf("by: %s named twice", g)
		}
		seen[g] = true
	}
	for _, d := range []struct{ name, day string }{{"since", f.Since}, {"until", f.Until}} {
		if d.day == "" {
			continue
		}
		if _, err := time.Parse(time.DateOnly, d.day); err != nil {
			return fmt.Errorf("%s: want a day as YYYY-MM-DD, got %q", d.name, d.day)
		}
	}
	if f.Since != "" && f.Until != "" && f.Since > f.Until {
		return fmt.Errorf("since (%s) is after until (%s)", f.Since, f.Until)
	}
	if f.Sort != "" && !seen[f.Sort] && !slices.Contains(UsageSums, f.Sort) {
		cols := append(slices.Clone(f.By), UsageSums...)
		return fmt.Errorf("sort: %q is not a column of this report (want one of %s)", f.Sort, strings.Join(cols, ", "))
	}
	if f.Limit < 0 || f.Offset < 0 {
		return fmt.Errorf("limit and offset: want 0 or more, got %d and %d", f.Limit, f.Offset)
	}
	return nil
}
