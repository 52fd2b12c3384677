package store

// Usage tallies: each append's spend is added to its user's row for the
// day and model (ledger.UsageDay) by the transaction that stores the
// reply — on SQLite one more statement of the group commit, on PostgreSQL
// one more statement of its pipeline — so no turn pays a transaction of
// its own, and the tallies never disagree with the stored messages.

import (
	"context"
	"fmt"
	"strings"

	"gorm.io/gorm"

	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/query"
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
		if _, err := st.exec(tx, tallyUsageSQL.text(len(chunk)), usageArgs(chunk)...); err != nil {
			return fmt.Errorf("tally usage: %w", err)
		}
	}
	return nil
}

// tallyOne adds one usage to its row on tx, as tallyUsage does (an
// extraction's settle).
func tallyOne(tx *gorm.DB, u *ledger.Usage) error {
	if err := tx.Exec(tallyUsageSQL.text(1), usageArgs(ledger.UsageRows([]*ledger.Usage{u}))...).Error; err != nil {
		return fmt.Errorf("tally usage: %w", err)
	}
	return nil
}

// usageArgs is the arguments of tallyUsageSQL for rows.
func usageArgs(rows []ledger.UsageDay) []any {
	args := make([]any, 0, 9*len(rows))
	for i := range rows {
		r := &rows[i]
		args = append(args, &r.UserKey, &r.Day, &r.Model, &r.Channel, &r.PromptTokens, &r.CompletionTokens, &r.Cost, &r.Turns, &r.EstimatedTokens)
	}
	return args
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

// The report's filter and rows are package query's (query.UsageFilter);
// the store keeps their names for its callers and tests.
type (
	// UsageFilter is query.UsageFilter.
	UsageFilter = query.UsageFilter
	// UsageRow is query.UsageRow.
	UsageRow = query.UsageRow
)

// usageGroups are the columns of the groups a report may have
// (query.UsageGroups).
var usageGroups = map[string]string{"user": "user_key", "day": "day", "model": "model", "channel": "channel"}

const usageSumsSelect = "COALESCE(SUM(prompt_tokens), 0) AS prompt_tokens, COALESCE(SUM(completion_tokens), 0) AS completion_tokens, " +
	"COALESCE(SUM(cost), 0) AS cost, COALESCE(SUM(turns), 0) AS turns, COALESCE(SUM(estimated_tokens), 0) AS estimated_tokens"

// usageGrouped is the query of f's groups and their sums, unordered, and
// its group columns.
func (s *DB) usageGrouped(ctx context.Context, f query.UsageFilter) (*gorm.DB, []string, error) {
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
func (s *DB) UsageReport(ctx context.Context, f query.UsageFilter) ([]query.UsageRow, error) {
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
	var out []query.UsageRow
	for rows.Next() {
		var r query.UsageRow
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

// UsageSummary counts the rows UsageReport has for f (Sort, Limit and
// Offset aside) and sums them.
func (s *DB) UsageSummary(ctx context.Context, f query.UsageFilter) (query.UsageSummary, error) {
	f.Sort, f.Limit, f.Offset = "", 0, 0
	sub, _, err := s.usageGrouped(ctx, f)
	if err != nil {
		return query.UsageSummary{}, err
	}
	var r query.UsageSummary
	err = s.read.WithContext(maintenance(ctx)).Table("(?) AS g", sub).
		Select("COUNT(*) AS n_rows, "+usageSumsSelect).Row().
		Scan(&r.Rows, &r.PromptTokens, &r.CompletionTokens, &r.Cost, &r.Turns, &r.EstimatedTokens)
	if err != nil {
		return query.UsageSummary{}, fmt.Errorf("usage summary: %w", err)
	}
	return r, nil
}
