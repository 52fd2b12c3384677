package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ncruces/go-sqlite3"
	"gorm.io/gorm"
)

// stmtCacheMax bounds the statements kept prepared. A statement's text
// depends only on the shape of its batch (how many conversations,
// messages and final replies, whether a row must be active), never on
// values: each kind of statement has one text per row count up to
// stmtRows, about a hundred texts in all.
const stmtCacheMax = 256

// stmtCache runs SQLite's committer: each batch's transaction on the
// writer's one connection, held for the batch, and the appends'
// statements kept prepared on it.
//
// The driver compiles a statement every time it runs one that is not
// prepared, which for a turn's appends cost as much as running them. A
// statement prepared through database/sql inside a transaction ends with
// it, and one prepared outside is copied into each transaction that runs
// it (Tx.StmtContext), which with the GORM transaction around it cost
// about eighty allocations a turn. So the committer holds the connection
// itself for a batch (sql.Conn), begins and ends the transaction on it,
// and runs the appends' statements on the SQLite connection under it
// (Conn.Raw): prepared there the first time a text is met, inside the
// transaction, and kept for as long as that connection lives. The
// batch's other writes run through GORM on the same held connection
// (tx), inside the same transaction.
//
// Everything but prepared runs on the committer's one worker (SQLite has
// one writer); tx is its GORM handle, whose connection is the one held.
type stmtCache struct {
	db        *sql.DB
	translate func(error) error
	tx        *gorm.DB

	raw   *sqlite3.Conn // the connection stmts were prepared on
	stmts map[string]*sqlite3.Stmt
	times []byte // a time's text, bound from here
	// prepared counts the statements run through a kept statement, and
	// compiled the texts prepared.
	prepared, compiled atomic.Int64
}

func newStmtCache(db *gorm.DB) *stmtCache {
	sqlDB, _ := db.DB()
	// A handle of its own (the Context clones its statement: setting the
	// connection on it changes nothing else), without GORM's transaction
	// around single writes: the batch's is open.
	tx := db.Session(&gorm.Session{NewDB: true, Context: context.Background(), SkipDefaultTransaction: true})
	return &stmtCache{db: sqlDB, translate: db.Dialector.(gorm.ErrorTranslator).Translate, tx: tx,
		stmts: map[string]*sqlite3.Stmt{}}
}

// transaction runs fn in one immediate transaction on the writer's
// connection, held until it ends: committed when fn returns nil, else
// rolled back, and fn's error returned, as gorm.DB.Transaction does.
func (c *stmtCache) transaction(fn func(tx *gorm.DB) error) (err error) {
	conn, err := c.db.Conn(context.Background())
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := c.rawExec(conn, "BEGIN IMMEDIATE"); err != nil {
		return c.translate(err)
	}
	c.tx.Statement.ConnPool = conn
	done := false
	defer func() {
		c.tx.Statement.ConnPool = nil
		if !done {
			c.rawExec(conn, "ROLLBACK") // fn panicked
		}
	}()
	if err = fn(c.tx); err != nil {
		done = true
		c.rawExec(conn, "ROLLBACK")
		return err
	}
	err = c.rawExec(conn, "COMMIT")
	done = true
	if err != nil {
		// As the driver's Commit: a COMMIT that failed may have left the
		// transaction open.
		c.rawRun(conn, func(raw *sqlite3.Conn) error {
			if !raw.GetAutocommit() {
				raw.Exec("ROLLBACK")
			}
			return nil
		})
		return c.translate(err)
	}
	return nil
}

// errNotSQLite: the connection under the writer is not the SQLite
// driver's, which cannot happen with the driver this store opens.
var errNotSQLite = errors.New("store: the writer's connection is not an SQLite connection")

// rawRun runs f on the SQLite connection under conn.
func (c *stmtCache) rawRun(conn *sql.Conn, f func(raw *sqlite3.Conn) error) error {
	return conn.Raw(func(dc any) error {
		r, ok := dc.(interface{ Raw() *sqlite3.Conn })
		if !ok {
			return errNotSQLite
		}
		return f(r.Raw())
	})
}

func (c *stmtCache) rawExec(conn *sql.Conn, query string) error {
	return c.rawRun(conn, func(raw *sqlite3.Conn) error { return raw.Exec(query) })
}

// exec runs query in the transaction tx and returns the rows it
// affected: through its kept statement in a transaction of this cache's,
// else as tx.Exec would. A nil cache just runs tx.Exec.
func (c *stmtCache) exec(tx *gorm.DB, query string, args ...any) (int64, error) {
	if c != nil {
		if conn, ok := tx.Statement.ConnPool.(*sql.Conn); ok && tx.Statement.ConnPool == c.tx.Statement.ConnPool {
			var n int64
			err := c.rawRun(conn, func(raw *sqlite3.Conn) (err error) {
				n, err = c.run(raw, query, args)
				return err
			})
			return n, c.translate(err)
		}
	}
	res := tx.Exec(query, args...)
	return res.RowsAffected, res.Error
}

// run runs query with args on raw through its kept statement, prepared
// now if it is not yet, and returns the rows it changed.
func (c *stmtCache) run(raw *sqlite3.Conn, query string, args []any) (int64, error) {
	if raw != c.raw {
		// Statements belong to the connection they were prepared on; a
		// new one (database/sql replaced the old) starts over.
		c.forget()
		c.raw = raw
	}
	st := c.stmts[query]
	keep := true
	if st == nil {
		var tail string
		var err error
		if st, tail, err = raw.Prepare(query); err != nil {
			return 0, err
		}
		if st == nil || strings.TrimSpace(tail) != "" {
			if st != nil {
				st.Close()
			}
			return 0, fmt.Errorf("store: not one statement: %.80s", query)
		}
		c.compiled.Add(1)
		if keep = len(c.stmts) < stmtCacheMax; keep {
			c.stmts[query] = st
		}
	} else {
		c.prepared.Add(1)
	}
	if !keep {
		defer st.Close()
	}
	if err := c.bind(st, args); err != nil {
		st.ClearBindings()
		return 0, err
	}
	err := st.Exec()
	if cerr := st.ClearBindings(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	return raw.Changes(), nil
}

// bind binds args to st's parameters in order, each as the driver binds
// it through database/sql (sqliteTimeFormat for times), text made
// storable as storableConn makes it.
func (c *stmtCache) bind(st *sqlite3.Stmt, args []any) error {
	for i, a := range args {
		if err := c.bindOne(st, i+1, a, true); err != nil {
			return err
		}
	}
	return nil
}

func (c *stmtCache) bindOne(st *sqlite3.Stmt, i int, a any, convert bool) error {
	switch v := a.(type) {
	case nil:
		return st.BindNull(i)
	case string:
		return bindStorable(st, i, v)
	case int64:
		return st.BindInt64(i, v)
	case int:
		return st.BindInt(i, v)
	case float64:
		return st.BindFloat(i, v)
	case bool:
		return st.BindBool(i, v)
	case []byte:
		return st.BindBlob(i, v)
	case time.Time:
		return c.bindTime(st, i, v)
	}
	// Pointers to those, nil as NULL: the hot statements pass their rows'
	// fields by address, which puts them in an interface without a copy
	// on the heap.
	switch v := a.(type) {
	case *string:
		return bindPtr(st, i, v, bindStorable)
	case *int64:
		return bindPtr(st, i, v, (*sqlite3.Stmt).BindInt64)
	case *int:
		return bindPtr(st, i, v, (*sqlite3.Stmt).BindInt)
	case *float64:
		return bindPtr(st, i, v, (*sqlite3.Stmt).BindFloat)
	case *bool:
		return bindPtr(st, i, v, (*sqlite3.Stmt).BindBool)
	case *time.Time:
		return bindPtr(st, i, v, c.bindTime)
	}
	return c.convert(st, i, a, convert)
}

// bindStorable binds s as text, made storable as every text the store
// binds is (storableValue).
func bindStorable(st *sqlite3.Stmt, i int, s string) error { return st.BindText(i, storableText(s)) }

// bindPtr binds *p with bind, or NULL for a nil p.
func bindPtr[T any](st *sqlite3.Stmt, i int, p *T, bind func(*sqlite3.Stmt, int, T) error) error {
	if p == nil {
		return st.BindNull(i)
	}
	return bind(st, i, *p)
}

// bindTime binds t as the driver's time text.
func (c *stmtCache) bindTime(st *sqlite3.Stmt, i int, t time.Time) error {
	// BindText copies the text into SQLite's memory before it returns, so
	// the buffer is free again for the next time. (BindRawText converts
	// to a string, which allocates.)
	c.times = t.AppendFormat(c.times[:0], sqliteTimeFormat)
	return st.BindText(i, unsafe.String(unsafe.SliceData(c.times), len(c.times)))
}

// convert binds what bindOne does not take as it is.
func (c *stmtCache) convert(st *sqlite3.Stmt, i int, a any, convert bool) error {
	if !convert {
		return fmt.Errorf("store: cannot bind %T", a)
	}
	// Pointers, driver.Valuers and other kinds, as database/sql
	// converts what the driver does not take as it is.
	v, err := driver.DefaultParameterConverter.ConvertValue(a)
	if err != nil {
		return fmt.Errorf("store: argument %d: %w", i, err)
	}
	return c.bindOne(st, i, v, false)
}

// forget drops the statements of a connection that is gone.
func (c *stmtCache) forget() {
	clear(c.stmts)
	c.raw = nil
}

// close closes the kept statements, on their connection. Called once the
// committer has stopped.
func (c *stmtCache) close() {
	if len(c.stmts) == 0 {
		return
	}
	conn, err := c.db.Conn(context.Background())
	if err != nil {
		return
	}
	defer conn.Close()
	c.rawRun(conn, func(raw *sqlite3.Conn) error {
		if raw == c.raw {
			for _, st := range c.stmts {
				st.Close()
			}
		}
		return nil
	})
	c.forget()
}
