package store

import (
	"github.com/ncruces/go-sqlite3"
	_ "github.com/ncruces/go-sqlite3/driver" // registers "sqlite3"
	"github.com/ncruces/go-sqlite3/ext/fts5"
	"github.com/ncruces/go-sqlite3/gormlite"
	"gorm.io/gorm"
)

// Every connection has FTS5, the full-text search the notes are
// recalled by (notesql.go).
func init() { sqlite3.AutoExtension(fts5.Register) }

// The embedded store runs on github.com/ncruces/go-sqlite3: SQLite built
// to WebAssembly and translated to Go, so no cgo. Its database/sql driver
// keeps a prepared statement compiled (the committer prepares its
// statements once, stmtCache), where the driver chatgate used before,
// glebarez/go-sqlite, compiled every statement each time it ran. GORM
// talks to it through ncruces' own dialector, gormlite (GORM's SQLite
// dialect, schema and migrator, forked from glebarez/sqlite, which
// chatgate used before and which linked a second, unused engine,
// modernc.org/sqlite): the binary links one SQLite engine. gormlite opens
// the DSN with the driver's own Open, which reads _txlock, _timefmt and
// _pragma as sql.Open("sqlite3", …) does, and translates the driver's
// errors: a duplicate key (how a client message id already stored shows)
// to gorm.ErrDuplicatedKey, a foreign-key violation to
// gorm.ErrForeignKeyViolated.
const sqliteDriverName = "sqlite3"

// sqliteTimeFormat is how times are written as text, and read back: the
// format of glebarez/go-sqlite, so that a database written by an earlier
// chatgate keeps one format and its times compare as text in order.
const sqliteTimeFormat = "2006-01-02 15:04:05.999999999-07:00"

// openSQLite is GORM's SQLite dialect over the driver, its text
// arguments made storable (openStorableSQLite).
func openSQLite(dsn string) (gorm.Dialector, error) {
	db, err := openStorableSQLite(dsn)
	if err != nil {
		return nil, err
	}
	return gormlite.OpenDB(db), nil
}
