package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/ncruces/go-sqlite3"
	sqlitedriver "github.com/ncruces/go-sqlite3/driver"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// Text that reaches the database comes from outside: the user's words,
// the model's answers and the arguments it writes, tool results, file
// names, summaries. PostgreSQL refuses a NUL byte or bytes that are not
// UTF-8 in a text value (SQLSTATE 22021, for good: every retry is refused
// again), where SQLite stores them as they are. So every text value is
// made storable where it is bound to a statement, by storableValue
// (ledger.StorableText, the rule the domain compares text by), on both
// stores alike: both hold the same text for the same input, and a column
// added later cannot skip the rule, since no row reaches either database
// without being bound.
//
// Every statement's arguments pass storableValue at the point its driver
// binds them:
//   - database/sql, which GORM and the store's own SQL use on both
//     drivers: the connections' CheckNamedValue (storablePGConn over pgx,
//     storableConn over SQLite), which database/sql calls on every
//     argument of every statement;
//   - PostgreSQL's pipeline of appends, which talks to pgx itself: every
//     statement queued on its batch (pgPipe.run);
//   - SQLite's committer, whose prepared statements bind on the SQLite
//     connection itself (stmtCache.bindOne).
//
// Blobs ([]byte, bytea or BLOB) are left as they are.

// storableText is s as both stores keep it (ledger.StorableText).
func storableText(s string) string { return ledger.StorableText(s) }

// storableValue is v with its text made storable: a string (or a value
// of a string kind), a pointer to one, what a driver.Valuer gives, or
// each element of a slice of them (PostgreSQL's array parameters). Any
// other value is returned as it is. A value that needs no change is
// returned itself: the caller's own value is never changed in place.
func storableValue(v any) any {
	switch x := v.(type) {
	case nil, []byte, int64, int, float64, bool, time.Time, *int64, *int, *float64, *bool, *time.Time:
		return v
	case string:
		return storableText(x)
	case *string:
		if x == nil || storableString(*x) {
			return v
		}
		fixed := storableText(*x)
		return &fixed
	case []string:
		return storableSlice(x, func(s string) string { return storableText(s) }, storableString)
	case []*string:
		return storableSlice(x, func(s *string) *string {
			if s == nil {
				return nil
			}
			fixed := storableText(*s)
			return &fixed
		}, func(s *string) bool { return s == nil || storableString(*s) })
	case driver.Valuer:
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
			return v
		}
		dv, err := x.Value()
		if s, ok := dv.(string); ok && err == nil && !storableString(s) {
			return storableText(s)
		}
		return v
	}
	rv := reflect.ValueOf(v)
	switch {
	case rv.Kind() == reflect.String && !storableString(rv.String()):
		return storableText(rv.String())
	case rv.Kind() == reflect.Pointer && !rv.IsNil() && rv.Elem().Kind() == reflect.String && !storableString(rv.Elem().String()):
		return storableText(rv.Elem().String())
	}
	return v
}

// storableSlice is xs, or a copy with fix applied to each element that
// is not ok.
func storableSlice[T any](xs []T, fix func(T) T, ok func(T) bool) []T {
	i := slices.IndexFunc(xs, func(x T) bool { return !ok(x) })
	if i < 0 {
		return xs
	}
	out := slices.Clone(xs)
	for ; i < len(out); i++ {
		if !ok(out[i]) {
			out[i] = fix(out[i])
		}
	}
	return out
}

// storableArgs makes args storable in place (the slice is the caller's
// own list of arguments, not the values it points to).
func storableArgs(args []any) {
	for i, a := range args {
		args[i] = storableValue(a)
	}
}

// storableString reports whether s needs no change to be stored.
func storableString(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// storablePGConnector opens pgx's database/sql connections wrapped in
// storablePGConn.
type storablePGConnector struct{ driver.Connector }

func (c storablePGConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	pc, ok := conn.(*stdlib.Conn)
	if !ok {
		conn.Close()
		return nil, errors.New("store: the pool's connection is not pgx's")
	}
	return &storablePGConn{pc}, nil
}

// storablePGConn is a pgx database/sql connection whose arguments pass
// storableValue. pgx's prepared statements check no argument themselves,
// so database/sql checks every statement's with the connection's
// CheckNamedValue.
type storablePGConn struct{ *stdlib.Conn }

func (c *storablePGConn) CheckNamedValue(nv *driver.NamedValue) error {
	nv.Value = storableValue(nv.Value)
	return nil
}

// openStorableSQLite is a database/sql pool of SQLite connections whose
// text arguments pass storableText.
func openStorableSQLite(dsn string) (*sql.DB, error) {
	c, err := (&sqlitedriver.SQLite{}).OpenConnector(dsn)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(storableConnector{c}), nil
}

// storableConnector opens the SQLite driver's connections wrapped in
// storableConn.
type storableConnector struct{ driver.Connector }

func (c storableConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc, ok := conn.(sqliteConn)
	if !ok {
		conn.Close()
		return nil, errNotSQLite
	}
	return storableConn{sc}, nil
}

// sqliteConn is what the SQLite driver's connections do that database/sql
// and the store use.
type sqliteConn interface {
	sqlitedriver.Conn
	driver.ExecerContext
	driver.NamedValueChecker
}

// storableConn is a SQLite driver connection whose statements' text
// arguments pass storableText. The driver runs a statement with
// arguments through a prepared statement (its ExecContext answers
// ErrSkip then), so database/sql checks them with that statement's
// CheckNamedValue: storableStmt's.
type storableConn struct{ sqliteConn }

func (c storableConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c storableConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	st, err := c.sqliteConn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	ss, ok := st.(sqliteStmt)
	if !ok {
		st.Close()
		return nil, errNotSQLite
	}
	return storableStmt{ss}, nil
}

func (c storableConn) CheckNamedValue(nv *driver.NamedValue) error {
	return storableArg(nv, c.sqliteConn.CheckNamedValue)
}

// sqliteStmt is what the SQLite driver's statements do.
type sqliteStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
	driver.NamedValueChecker
}

type storableStmt struct{ sqliteStmt }

func (s storableStmt) CheckNamedValue(nv *driver.NamedValue) error {
	return storableArg(nv, s.sqliteStmt.CheckNamedValue)
}

// storableArg checks nv as check (the driver's own) does, converting
// what the driver does not take as it is the way database/sql would
// (pointers, driver.Valuers), and makes its text storable.
func storableArg(nv *driver.NamedValue, check func(*driver.NamedValue) error) error {
	err := check(nv)
	if errors.Is(err, driver.ErrSkip) {
		nv.Value, err = driver.DefaultParameterConverter.ConvertValue(nv.Value)
	}
	if err != nil {
		return err
	}
	nv.Value = storableValue(nv.Value)
	return nil
}

// rejected is err marked ledger.ErrRejected when the database refused
// the data of the call for good: trying the same call again would be
// refused again. PostgreSQL's data exceptions (SQLSTATE class 22: a
// character the encoding cannot hold, a number out of range, a value too
// long) and program limits (class 54: an index row or a statement too
// large); SQLite's string or blob too big, or a datatype mismatch. Any
// other error may pass (a connection lost, a lock, a deadline).
func rejected(err error) error {
	if err == nil || errors.Is(err, ledger.ErrRejected) {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "54") {
			return fmt.Errorf("%w: %w", ledger.ErrRejected, err)
		}
		return err
	}
	if errors.Is(err, sqlite3.TOOBIG) || errors.Is(err, sqlite3.MISMATCH) {
		return fmt.Errorf("%w: %w", ledger.ErrRejected, err)
	}
	return err
}
