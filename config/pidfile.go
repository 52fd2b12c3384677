package config

import (
	"path/filepath"
	"strings"
)

// PidFileName is the default pid file's name.
const PidFileName = "gateway.pid"

// defaultPidFile puts the pid file next to the SQLite database, the one
// file a gateway surely owns (two gateways on one directory would share
// their database too); with PostgreSQL next to bot.yaml, else in the
// working directory. Relative paths stay relative to the working
// directory, as the database's is.
func (c *Config) defaultPidFile() string {
	if c.Storage.Driver == "sqlite" && c.Storage.DSN != "" && !strings.HasPrefix(c.Storage.DSN, ":memory:") {
		dsn, _, _ := strings.Cut(strings.TrimPrefix(c.Storage.DSN, "file:"), "?")
		return filepath.Join(filepath.Dir(dsn), PidFileName)
	}
	if c.File != "" && c.File != EmbeddedName {
		return filepath.Join(filepath.Dir(c.File), PidFileName)
	}
	return PidFileName
}
