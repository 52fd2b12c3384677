package admin

import (
	"encoding/csv"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/query"
)

// Usage report limits: a JSON answer is a page (default 100 rows); a CSV
// is the whole report, up to maxUsageCSV rows, or a page when asked for.
const (
	defaultUsageLimit = 100
	maxUsageLimit     = 10_000
	maxUsageCSV       = 100_000
)

// DefaultUsageBy is what a report is grouped by when by is not given:
// the tallies as they are kept.
var DefaultUsageBy = []string{"user", "day", "model"}

// usageReport is the answer of GET /admin/api/usage.
type usageReport struct {
	By     []string           `json:"by"`
	Since  string             `json:"since,omitempty"`
	Until  string             `json:"until,omitempty"`
	Sort   string             `json:"sort,omitempty"`
	Order  string             `json:"order"`
	Rows   []query.UsageRow   `json:"rows"`
	Totals ledger.UsageTotals `json:"totals"`
	// TotalRows is how many rows the report has over all its pages.
	TotalRows  int64 `json:"total_rows"`
	Limit      int   `json:"limit"`
	Offset     int   `json:"offset"`
	NextOffset *int  `json:"next_offset,omitempty"`
}

// ParseUsageBy reads a comma-separated list of groups ("user,day");
// empty items are skipped, so "" groups by nothing. The groups are
// checked by query.UsageFilter.Validate.
func ParseUsageBy(s string) []string {
	by := []string{}
	for _, g := range strings.Split(s, ",") {
		if g = strings.TrimSpace(g); g != "" {
			by = append(by, g)
		}
	}
	return by
}

// SetUsageOrder sets f's order from an order of "asc", "desc" or "":
// without one, keys sort up and sums (the biggest spenders first) down;
// an order without a column sorts by the first group.
func SetUsageOrder(f *query.UsageFilter, order string) error {
	if f.Sort == "" && order != "" && len(f.By) > 0 {
		f.Sort = f.By[0]
	}
	switch order {
	case "asc":
		f.Desc = false
	case "desc":
		f.Desc = true
	case "":
		f.Desc = slices.Contains(query.UsageSums, f.Sort)
	default:
		return fmt.Errorf("order: want asc or desc, got %q", order)
	}
	return nil
}

// usageFilter reads a report's filter from the query; format is "json"
// or "csv".
func usageFilter(r *http.Request) (f query.UsageFilter, format string, limitSet bool, err error) {
	q := r.URL.Query()
	f = query.UsageFilter{Since: q.Get("since"), Until: q.Get("until"), User: q.Get("user"), Channel: q.Get("channel"),
		Model: q.Get("model"), Sort: q.Get("sort"), By: DefaultUsageBy}
	if q.Has("by") {
		f.By = ParseUsageBy(q.Get("by"))
	}
	switch format = q.Get("format"); format {
	case "":
		format = "json"
	case "json", "csv":
	default:
		return f, format, false, fmt.Errorf("format: want json or csv, got %q", format)
	}
	if err := SetUsageOrder(&f, q.Get("order")); err != nil {
		return f, format, false, err
	}
	def, maxV := defaultUsageLimit, maxUsageLimit
	if format == "csv" {
		def, maxV = 0, maxUsageCSV
	}
	limitSet = q.Get("limit") != ""
	if f.Limit, err = intParam(r, "limit", def, maxV); err == nil && limitSet && f.Limit == 0 {
		err = fmt.Errorf("limit: want a whole number from 1 to %d, got 0", maxV)
	}
	if err == nil {
		f.Offset, err = intParam(r, "offset", 0, 1<<30)
	}
	if err == nil {
		err = f.Validate()
	}
	return f, format, limitSet, err
}

// usage answers a usage report: GET /admin/api/usage, JSON by default,
// CSV with format=csv.
func (a *Admin) usage(w http.ResponseWriter, r *http.Request, who string) {
	f, format, limitSet, err := usageFilter(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	a.logAction(r, who, "usage", r.URL.RawQuery)
	if format == "csv" {
		a.usageCSV(w, r, f, limitSet)
		return
	}
	sum, err := a.opts.Store.UsageSummary(r.Context(), f)
	if err != nil {
		a.storeError(w, err)
		return
	}
	rows, err := a.opts.Store.UsageReport(r.Context(), f)
	if err != nil {
		a.storeError(w, err)
		return
	}
	out := usageReport{By: f.By, Since: f.Since, Until: f.Until, Sort: f.Sort, Order: "asc", Rows: rows,
		Totals: RoundUsage(sum.UsageTotals), TotalRows: sum.Rows, Limit: f.Limit, Offset: f.Offset}
	if f.Desc {
		out.Order = "desc"
	}
	if out.Rows == nil {
		out.Rows = []query.UsageRow{}
	}
	for i := range out.Rows {
		out.Rows[i].UsageTotals = RoundUsage(out.Rows[i].UsageTotals)
	}
	if next := f.Offset + len(rows); int64(next) < sum.Rows && len(rows) > 0 {
		out.NextOffset = &next
	}
	writeJSON(w, http.StatusOK, out)
}

// usageCSV sends the report as a CSV download: the whole report, unless
// a limit asks for a page; one over maxUsageCSV rows is refused rather
// than cut short.
func (a *Admin) usageCSV(w http.ResponseWriter, r *http.Request, f query.UsageFilter, limitSet bool) {
	if !limitSet {
		f.Limit = maxUsageCSV + 1
	}
	rows, err := a.opts.Store.UsageReport(r.Context(), f)
	if err != nil {
		a.storeError(w, err)
		return
	}
	if len(rows) > maxUsageCSV {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("the report has more than %d rows: narrow it (since, until, user, channel, model), group it by less, or take it in pages (limit, offset)", maxUsageCSV))
		return
	}
	name := "usage"
	if f.Since != "" {
		name += "-from-" + f.Since
	}
	if f.Until != "" {
		name += "-to-" + f.Until
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s.csv"`, name))
	if err := WriteUsageCSV(w, f.By, rows); err != nil {
		a.log.Warn("admin: writing a usage report", slog.String("error", err.Error()))
	}
}

// UsageColumns are a report's columns: by's groups, then the sums.
func UsageColumns(by []string) []string {
	return append(slices.Clone(by), query.UsageSums...)
}

// UsageCells is a row's cells, in the order of UsageColumns(by).
func UsageCells(by []string, r query.UsageRow) []string {
	cells := make([]string, 0, len(by)+len(query.UsageSums))
	for _, g := range by {
		cells = append(cells, map[string]string{"user": r.User, "day": r.Day, "model": r.Model, "channel": r.Channel}[g])
	}
	return append(cells, strconv.FormatInt(r.PromptTokens, 10), strconv.FormatInt(r.CompletionTokens, 10),
		FormatCost(r.Cost), strconv.FormatInt(r.Turns, 10), strconv.FormatInt(r.EstimatedTokens, 10))
}

// WriteUsageCSV writes a report as CSV (RFC 4180): a header row of its
// columns (UsageColumns), then one line per row; no totals line, so that
// summing a column counts each spend once. Cells are written as stored:
// a user key starts with its channel's name, so a spreadsheet never
// reads one as a formula.
func WriteUsageCSV(w io.Writer, by []string, rows []query.UsageRow) error {
	cw := csv.NewWriter(w)
	cw.Write(UsageColumns(by))
	for _, r := range rows {
		cw.Write(UsageCells(by, r))
	}
	cw.Flush()
	return cw.Error()
}

// RoundUsage rounds a sum's cost (a sum of floats) to what a report shows.
func RoundUsage(t ledger.UsageTotals) ledger.UsageTotals {
	t.Cost = math.Round(t.Cost*1e9) / 1e9
	return t
}

// FormatCost is a cost as reports print it: at most nine decimals, no
// trailing zeros ("0.036", "12", "0.000000153").
func FormatCost(c float64) string {
	return strconv.FormatFloat(math.Round(c*1e9)/1e9, 'f', -1, 64)
}
