package sessions

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"
)

// TestPipelineErrors: only an error the server gave a statement (severity
// ERROR) counts as a refused pipeline, rolled back and worth running again
// append by append; a lost connection or a session the server ended
// (FATAL, perhaps after the commit) leaves it unknown whether it landed,
// and the append gets a commit error, never ErrStale or ErrDuplicate.
func TestPipelineErrors(t *testing.T) {
	p := &pgPipe{translate: func(err error) error {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return fmt.Errorf("%w: %w", gorm.ErrDuplicatedKey, err)
		}
		return err
	}}
	for _, c := range []struct {
		name    string
		err     error
		refused bool
		want    error
	}{
		{"guard", &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: pgCodeStale}, true, ErrStale},
		{"claim", &pgconn.PgError{Severity: "ERROR", Code: pgCodeLostClaim}, true, ErrLostClaim},
		{"duplicate", &pgconn.PgError{Severity: "ERROR", Code: "23505"}, true, gorm.ErrDuplicatedKey},
		{"session ended", &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: pgCodeStale}, false, nil},
		{"connection lost", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), false, nil},
	} {
		if got := refusal(c.err) != nil; got != c.refused {
			t.Errorf("%s: refused %v, want %v", c.name, got, c.refused)
		}
		got := p.appendError(c.err)
		if c.want != nil && !errors.Is(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		if c.want == nil && (errors.Is(got, ErrStale) || errors.Is(got, ErrLostClaim) || !errors.Is(got, c.err)) {
			t.Errorf("%s: %v, want a commit error", c.name, got)
		}
	}
}
