package store

import "strings"

// rowTexts holds a multi-row statement's text for each row count from 1
// to stmtRows, built once: a statement's text depends only on how many
// rows it carries, and every batch of the group commit runs several of
// them. A statement never carries more than stmtRows rows.
type rowTexts [stmtRows + 1]string

// newRowTexts builds head, then n times row separated by ", ", then tail,
// for each n.
func newRowTexts(head, row, tail string) *rowTexts {
	var t rowTexts
	for n := 1; n <= stmtRows; n++ {
		var q strings.Builder
		q.Grow(len(head) + n*(len(row)+2) + len(tail))
		q.WriteString(head)
		for i := 0; i < n; i++ {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString(row)
		}
		q.WriteString(tail)
		t[n] = q.String()
	}
	return &t
}

// text is the statement for n rows, 1 ≤ n ≤ stmtRows.
func (t *rowTexts) text(n int) string { return t[n] }
