package store

// Usage tallies: each append's spend is added to its user's row for the
// day and model (ledger.UsageDay) by the transaction that stores the
// reply — on SQLite one more statement of the group commit, on PostgreSQL
// one more statement of its pipeline — so no turn pays a transaction of
// its own, and the tallies never disagree with the stored messages.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// usageOf is the usages of ops' appends.
func usageOf(ops []*writeOp) []*ledger.Usage {
	var us []*ledger.Usage
	for _, op := range ops {
		if op.app != nil && op.app.Usage != nil {
			us = append(us, op.app.Usage)
		}
	}
	return us
}

const usageUpsertTail = ` ON CONFLICT (user_key, day, model) DO UPDATE SET
	prompt_tokens = usage_days.prompt_tokens + excluded.prompt_tokens,
	completion_tokens = usage_days.completion_tokens + excluded.completion_tokens,
	cost = usage_days.cost + excluded.cost, turns = usage_days.turns + excluded.turns,
	estimated_tokens = usage_days.estimated_tokens + excluded.estimated_tokens`

// tallyUsage adds the usages of ops to their rows, on the transaction's
// statements (SQLite's group commit).
func tallyUsage(tx *gorm.DB, st *stmtCache, ops []*writeOp) error {
	rows := ledger.UsageRows(usageOf(ops))
	for start := 0; start < len(rows); start += stmtRows {
		chunk := rows[start:min(start+stmtRows, len(rows))]
		args := make([]any, 0, 9*len(chunk))
		for i := range chunk {
			r := &chunk[i]
			args = append(args, &r.UserKey, &r.Day, &r.Model, &r.Channel, &r.PromptTokens, &r.CompletionTokens, &r.Cost, &r.Turns, &r.EstimatedTokens)
		}
		if _, err := st.exec(tx, tallyUsageSQL.text(len(chunk)), args...); err != nil {
			return fmt.Errorf("tally usage: %w", err)
		}
	}
	return nil
}

var tallyUsageSQL = newRowTexts(`INSERT INTO usage_days (user_key, day, model, channel, prompt_tokens, completion_tokens, cost, turns, estimated_tokens) VALUES `,
	"(?, ?, ?, ?, ?, ?, ?, ?, ?)", usageUpsertTail)

// pgTallyUsage is tallyUsage on PostgreSQL's pipeline: the rows as arrays,
// one statement text whatever their number.
var pgTallyUsage = `INSERT INTO usage_days (user_key, day, model, channel, prompt_tokens, completion_tokens, cost, turns, estimated_tokens)
SELECT * FROM ` + pgArrayRows("user_key $1::varchar[]", "day $2::varchar[]", "model $3::varchar[]", "channel $4::varchar[]",
	"prompt_tokens $5::bigint[]", "completion_tokens $6::bigint[]", "cost $7::numeric[]", "turns $8::bigint[]",
	"estimated_tokens $9::bigint[]") + ` AS v` + usageUpsertTail

// pgUsageArgs is the arguments of pgTallyUsage for rows.
func pgUsageArgs(rows []ledger.UsageDay) []any {
	n := len(rows)
	users, days, models, channels := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	prompt, completion, turns, estimated := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	cost := make([]float64, n)
	for i, r := range rows {
		users[i], days[i], models[i], channels[i] = r.UserKey, r.Day, r.Model, r.Channel
		prompt[i], completion[i], cost[i], turns[i], estimated[i] = r.PromptTokens, r.CompletionTokens, r.Cost, r.Turns, r.EstimatedTokens
	}
	return []any{users, days, models, channels, prompt, completion, cost, turns, estimated}
}

// UserUsage is a user's spend on one day and in that day's month, both
// days as YYYY-MM-DD: day, and the first of its month.
func (s *DB) UserUsage(ctx context.Context, user, day, monthStart string) (today, month ledger.UsageTotals, err error) {
	var r struct {
		DP, DC, MP, MC, DT, MT, DE, ME int64
		DCost, MCost                   float64
	}
	err = s.read.WithContext(ctx).Raw(`SELECT
		COALESCE(SUM(CASE WHEN day = ? THEN prompt_tokens ELSE 0 END), 0) AS dp,
		COALESCE(SUM(CASE WHEN day = ? THEN completion_tokens ELSE 0 END), 0) AS dc,
		COALESCE(SUM(CASE WHEN day = ? THEN cost ELSE 0 END), 0) AS d_cost,
		COALESCE(SUM(CASE WHEN day = ? THEN turns ELSE 0 END), 0) AS dt,
		COALESCE(SUM(CASE WHEN day = ? THEN estimated_tokens ELSE 0 END), 0) AS de,
		COALESCE(SUM(prompt_tokens), 0) AS mp, COALESCE(SUM(completion_tokens), 0) AS mc,
		COALESCE(SUM(cost), 0) AS m_cost, COALESCE(SUM(turns), 0) AS mt, COALESCE(SUM(estimated_tokens), 0) AS me
		FROM usage_days WHERE user_key = ? AND day >= ? AND day <= ?`,
		day, day, day, day, day, user, monthStart, day).Scan(&r).Error
	if err != nil {
		return today, month, fmt.Errorf("read usage of %s: %w", user, err)
	}
	today = ledger.UsageTotals{PromptTokens: r.DP, CompletionTokens: r.DC, Cost: r.DCost, Turns: r.DT, EstimatedTokens: r.DE}
	month = ledger.UsageTotals{PromptTokens: r.MP, CompletionTokens: r.MC, Cost: r.MCost, Turns: r.MT, EstimatedTokens: r.ME}
	return today, month, nil
}

// UsageFilter selects tallies for UsageReport. Empty fields select all.
type UsageFilter struct {
	Since, Until string // days, YYYY-MM-DD, both included
	User         string // exact user key
	Channel      string
	Model        string
	// By is what the rows are grouped by, any of "user", "day", "model"
	// and "channel"; none: one row of everything.
	By []string
	// Sort is the column the rows are ordered by: one of By, or a sum
	// (UsageSums); "": by By. Desc reverses it. Rows that tie are
	// ordered by By.
	Sort string
	Desc bool
	// Limit and Offset page the rows; Limit 0 is every row.
	Limit, Offset int
}

// UsageRow is one group of UsageReport: its keys (empty when not grouped
// by) and their sums.
type UsageRow struct {
	User    string `json:"user,omitempty"`
	Day     string `json:"day,omitempty"`
	Model   string `json:"model,omitempty"`
	Channel string `json:"channel,omitempty"`
	ledger.UsageTotals
}

// usageGroups are the columns a report may group by.
var usageGroups = map[string]string{"user": "user_key", "day": "day", "model": "model", "channel": "channel"}

// UsageGroups are the groups of a report, in the order they are named
// in messages.
var UsageGroups = []string{"user", "day", "model", "channel"}

// UsageSums are the summed columns of a report, in its order.
var UsageSums = []string{"prompt_tokens", "completion_tokens", "cost", "turns", "estimated_tokens"}

// ValidUsageGroup reports whether a report can group by g.
func ValidUsageGroup(g string) bool { _, ok := usageGroups[g]; return ok }

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

const usageSumsSelect = "COALESCE(SUM(prompt_tokens), 0) AS prompt_tokens, COALESCE(SUM(completion_tokens), 0) AS completion_tokens, " +
	"COALESCE(SUM(cost), 0) AS cost, COALESCE(SUM(turns), 0) AS turns, COALESCE(SUM(estimated_tokens), 0) AS estimated_tokens"

// usageGrouped is the query of f's groups and their sums, unordered, and
// its group columns.
func (s *DB) usageGrouped(ctx context.Context, f UsageFilter) (*gorm.DB, []string, error) {
	if err := f.Validate(); err != nil {
		return nil, nil, fmt.Errorf("usage report: %w", err)
	}
	var cols []string
	for _, g := range f.By {
		cols = append(cols, usageGroups[g])
	}
	sel := usageSumsSelect
	if len(cols) > 0 {
		sel = strings.Join(cols, ", ") + ", " + sel
	}
	q := s.read.WithContext(maintenance(ctx)).Table("usage_days").Select(sel)
	if f.Since != "" {
		q = q.Where("day >= ?", f.Since)
	}
	if f.Until != "" {
		q = q.Where("day <= ?", f.Until)
	}
	if f.User != "" {
		q = q.Where("user_key = ?", f.User)
	}
	if f.Channel != "" {
		q = q.Where("channel = ?", f.Channel)
	}
	if f.Model != "" {
		q = q.Where("model = ?", f.Model)
	}
	if len(cols) > 0 {
		q = q.Group(strings.Join(cols, ", "))
	}
	return q, cols, nil
}

// UsageReport sums the tallies f selects, by its groups, ordered by
// f.Sort then by the groups, and paged by f.Limit and f.Offset.
func (s *DB) UsageReport(ctx context.Context, f UsageFilter) ([]UsageRow, error) {
	q, cols, err := s.usageGrouped(ctx, f)
	if err != nil {
		return nil, err
	}
	var order []string
	if f.Sort != "" {
		expr := "SUM(" + f.Sort + ")" // a sum: the aggregate, not the output name that shadows the column
		if c, ok := usageGroups[f.Sort]; ok {
			expr = c
		}
		if f.Desc {
			expr += " DESC"
		}
		order = append(order, expr)
	}
	for _, c := range cols {
		if c != usageGroups[f.Sort] {
			order = append(order, c)
		}
	}
	if len(order) > 0 {
		q = q.Order(strings.Join(order, ", "))
	}
	if f.Limit > 0 {
		q = q.Limit(f.Limit)
	}
	if f.Offset > 0 {
		q = q.Offset(f.Offset)
	}
	rows, err := q.Rows()
	if err != nil {
		return nil, fmt.Errorf("usage report: %w", err)
	}
	defer rows.Close()
	var out []UsageRow
	for rows.Next() {
		var r UsageRow
		dest := make([]any, 0, len(cols)+5)
		for _, g := range f.By {
			switch g {
			case "user":
				dest = append(dest, &r.User)
			case "day":
				dest = append(dest, &r.Day)
			case "model":
				dest = append(dest, &r.Model)
			case "channel":
				dest = append(dest, &r.Channel)
			}
		}
		dest = append(dest, &r.PromptTokens, &r.CompletionTokens, &r.Cost, &r.Turns, &r.EstimatedTokens)
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("usage report: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// UsageSummary is a report's size and sums: how many rows it has
// unpaged, and the totals of all of them.
type UsageSummary struct {
	Rows int64
	ledger.UsageTotals
}

// UsageSummary counts the rows UsageReport has for f (Sort, Limit and
// Offset aside) and sums them.
func (s *DB) UsageSummary(ctx context.Context, f UsageFilter) (UsageSummary, error) {
	f.Sort, f.Limit, f.Offset = "", 0, 0
	sub, _, err := s.usageGrouped(ctx, f)
	if err != nil {
		return UsageSummary{}, err
	}
	var r UsageSummary
	err = s.read.WithContext(maintenance(ctx)).Table("(?) AS g", sub).
		Select("COUNT(*) AS n_rows, "+usageSumsSelect).Row().
		Scan(&r.Rows, &r.PromptTokens, &r.CompletionTokens, &r.Cost, &r.Turns, &r.EstimatedTokens)
	if err != nil {
		return UsageSummary{}, fmt.Errorf("usage summary: %w", err)
	}
	return r, nil
}
