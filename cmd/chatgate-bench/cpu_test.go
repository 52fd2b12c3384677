package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/chatgate/chatgate/internal/pgtest"
)

// TestServerCPUCountsTheBackends: the server's CPU grows by at least what
// one of its backends used meanwhile, and keeps it once that backend's
// connection is closed.
func TestServerCPUCountsTheBackends(t *testing.T) {
	dsn := pgtest.DSN(t)
	server, err := localPGServer(dsn)
	if err != nil {
		t.Skipf("the server is not on this machine: %v", err)
	}
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	sqlDB.SetMaxOpenConns(1)
	var pid int
	if err := db.Raw("SELECT pg_backend_pid()").Scan(&pid).Error; err != nil {
		t.Fatal(err)
	}
	backend := func() time.Duration {
		p, err := procfs.NewProc(pid)
		if err != nil {
			t.Fatal(err)
		}
		st, err := p.Stat()
		if err != nil {
			t.Fatal(err)
		}
		return time.Duration(st.UTime+st.STime) * time.Second / userHZ
	}
	read := func() time.Duration {
		v, err := server.read()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	s0, b0 := read(), backend()
	var n int64
	if err := db.Raw("SELECT count(*) FROM generate_series(1, 3000000) a, generate_series(1, 2) b").Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	b1 := backend()
	s1 := read()
	if b1 == b0 {
		t.Fatalf("the query took no CPU of backend %d", pid)
	}
	if s1-s0 < b1-b0 {
		t.Errorf("the server's CPU grew by %v while its backend %d used %v", s1-s0, pid, b1-b0)
	}
	sqlDB.Close()
	// Once the postmaster has reaped the backend (its process is gone),
	// its time is in the postmaster's children's times. (Between its
	// exit and then, the kernel shows the zombie with none.)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := procfs.NewProc(pid); err != nil {
			break
		}
	}
	if s2 := read(); s2 < s1 {
		t.Errorf("the server's CPU fell from %v to %v when a connection closed", s1, s2)
	}
}

func TestCPUBoundsLine(t *testing.T) {
	r := &report{
		Gateway:  []loadResult{{Clients: 1, PerSecond: 900, CPUMicrosPerTurn: 500}, {Clients: 50, PerSecond: 8000, CPUMicrosPerTurn: 200, CoresBusy: 1.6}},
		Postgres: []loadResult{{Clients: 1, PerSecond: 800, CPUMicrosPerTurn: 400, ServerCPUMicrosPerTurn: 300}, {Clients: 50, PerSecond: 6000, CPUMicrosPerTurn: 150, ServerCPUMicrosPerTurn: 100, CoresBusy: 1.5}},
	}
	var out bytes.Buffer
	r.printCPUBounds(&out)
	got := out.String()
	if strings.Count(got, "CPU at") != 1 || !strings.Contains(got, "CPU at 50 clients: a postgres turn took 150 µs of this process (gateway and clients) and 100 µs of the server, 250 µs in all") ||
		!strings.Contains(got, "A sqlite turn took 200 µs, storage included, with 1.60 cores busy (8000 turns/s)") {
		t.Errorf("bounds:\n%s", got)
	}
}
