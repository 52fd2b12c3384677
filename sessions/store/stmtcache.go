package store

import (
	"database/sql"
	"sync"
	"sync/atomic"

	"gorm.io/gorm"
)

// stmtCacheMax bounds the statements kept prepared. A statement's text
// depends only on the shape of its batch (how many conversations,
// messages and final replies, whether a row must be active), never on
// values: each kind of statement has one text per row count up to
// stmtRows, about a hundred texts in all.
const stmtCacheMax = 256

// stmtCache keeps the statements of SQLite's committer prepared on the
// writer's connection: the driver compiles a statement every time it runs
// one that is not prepared, which for a turn's appends cost as much as
// running them.
//
// A statement prepared inside a transaction ends with it (database/sql),
// so the cache prepares on the database, outside any transaction, and a
// transaction runs its statements through the prepared ones. A text met
// for the first time inside a batch runs unprepared there and is prepared
// after the batch has committed and its callers were answered, while the
// writer's one connection is free (prepareWanted, called by the committer
// between batches).
type stmtCache struct {
	db        *sql.DB
	translate func(error) error

	mu    sync.Mutex
	stmts map[string]*sql.Stmt
	want  map[string]bool
	// prepared counts the statements sent through a kept statement.
	prepared atomic.Int64
}

func newStmtCache(db *gorm.DB) *stmtCache {
	sqlDB, _ := db.DB()
	return &stmtCache{db: sqlDB, translate: db.Dialector.(gorm.ErrorTranslator).Translate,
		stmts: map[string]*sql.Stmt{}, want: map[string]bool{}}
}

// exec runs query in the transaction tx: through its kept statement when
// there is one, else as tx.Exec would (and asks for it to be prepared).
// It returns the rows affected. A nil cache just runs tx.Exec.
func (c *stmtCache) exec(tx *gorm.DB, query string, args ...any) (int64, error) {
	if c != nil {
		if stx, ok := tx.Statement.ConnPool.(*sql.Tx); ok {
			c.mu.Lock()
			st := c.stmts[query]
			if st == nil && len(c.stmts)+len(c.want) < stmtCacheMax {
				c.want[query] = true
			}
			c.mu.Unlock()
			if st != nil {
				c.prepared.Add(1)
				ctx := tx.Statement.Context
				res, err := stx.StmtContext(ctx, st).ExecContext(ctx, args...)
				if err != nil {
					return 0, c.translate(err)
				}
				return res.RowsAffected()
			}
		}
	}
	res := tx.Exec(query, args...)
	return res.RowsAffected, res.Error
}

// prepareWanted prepares the statements run unprepared since its last
// call. Called with no transaction open on the writer.
func (c *stmtCache) prepareWanted() {
	c.mu.Lock()
	if len(c.want) == 0 {
		c.mu.Unlock()
		return
	}
	want := c.want
	c.want = map[string]bool{}
	c.mu.Unlock()
	for q := range want {
		st, err := c.db.Prepare(q)
		if err != nil {
			continue // it keeps running unprepared; asked for again next time
		}
		c.mu.Lock()
		c.stmts[q] = st
		c.mu.Unlock()
	}
}

// close closes the kept statements.
func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for q, st := range c.stmts {
		st.Close()
		delete(c.stmts, q)
	}
}
