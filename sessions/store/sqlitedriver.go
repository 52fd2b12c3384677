package store

import (
	"errors"

	"github.com/glebarez/sqlite"
	sqlite3 "github.com/ncruces/go-sqlite3"
	_ "github.com/ncruces/go-sqlite3/driver" // registers "sqlite3"
	"gorm.io/gorm"
)

// The embedded store runs on github.com/ncruces/go-sqlite3: SQLite built
// to WebAssembly and translated to Go, so no cgo. Its database/sql driver
// keeps a prepared statement compiled (the committer prepares its
// statements once, stmtcache.go), where the driver chatgate used before,
// glebarez/go-sqlite, compiled every statement each time it ran. GORM
// talks to it through glebarez/sqlite's dialector (GORM's SQLite dialect,
// schema and migrator), told the driver's name.
const sqliteDriverName = "sqlite3"

// sqliteTimeFormat is how times are written as text, and read back: the
// format of glebarez/go-sqlite, so that a database written by an earlier
// chatgate keeps one format and its times compare as text in order.
const sqliteTimeFormat = "2006-01-02 15:04:05.999999999-07:00"

// sqliteDialector is GORM's SQLite dialect over the driver, with the
// driver's own errors translated (a duplicate key is how a client message
// id already stored shows).
type sqliteDialector struct{ sqlite.Dialector }

func openSQLite(dsn string) gorm.Dialector {
	return sqliteDialector{sqlite.Dialector{DriverName: sqliteDriverName, DSN: dsn}}
}

func (d sqliteDialector) Translate(err error) error {
	var serr *sqlite3.Error
	if !errors.As(err, &serr) {
		return err
	}
	switch serr.ExtendedCode() {
	case sqlite3.CONSTRAINT_UNIQUE, sqlite3.CONSTRAINT_PRIMARYKEY:
		return gorm.ErrDuplicatedKey
	case sqlite3.CONSTRAINT_FOREIGNKEY:
		return gorm.ErrForeignKeyViolated
	}
	return err
}
