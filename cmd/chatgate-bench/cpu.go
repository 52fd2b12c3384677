package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Where a turn's CPU goes. On one machine a gateway on SQLite spends its
// storage CPU in its own process; on PostgreSQL the server's backends
// spend theirs beside it, on the same cores. A step's CPU per turn is
// measured in both places, so that a throughput figure comes with what
// bounds it: cores ÷ CPU per turn.

// processCPU is the CPU time this process (the gateway under test and its
// clients) has used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pgServerCPU reads the CPU time of a PostgreSQL server running on this
// machine: its postmaster, every process it started that still runs
// (backends, background workers), and those that exited, which the kernel
// adds to the postmaster's children's times once it has reaped them
// (between a backend's exit and then, its time is not seen: the steps
// keep their connections open until they end).
type pgServerCPU struct {
	postmaster procfs.Proc
}

// userHZ is the unit of the times in /proc/<pid>/stat (USER_HZ, 100 on
// every Linux; procfs's CPUTime divides by the same).
const userHZ = 100

// localPGServer finds the postmaster of the server dsn names: the parent
// of the backend that answers. It fails when that process is not visible
// here as a postgres process (another machine, a container, no /proc).
func localPGServer(dsn string) (*pgServerCPU, error) {
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, err
	}
	if s, err := db.DB(); err == nil {
		defer s.Close()
	}
	var pid int
	if err := db.Raw("SELECT pg_backend_pid()").Scan(&pid).Error; err != nil {
		return nil, err
	}
	backend, err := procfs.NewProc(pid)
	if err != nil {
		return nil, fmt.Errorf("the server's backend %d is not a process here: %w", pid, err)
	}
	st, err := backend.Stat()
	if err != nil {
		return nil, err
	}
	pm, err := procfs.NewProc(st.PPID)
	if err != nil {
		return nil, err
	}
	pst, err := pm.Stat()
	if err != nil {
		return nil, err
	}
	if st.Comm != "postgres" || (pst.Comm != "postgres" && pst.Comm != "postmaster") {
		return nil, fmt.Errorf("process %d (%s, parent %s) is not this server's backend", pid, st.Comm, pst.Comm)
	}
	return &pgServerCPU{postmaster: pm}, nil
}

// read is the server's CPU time so far.
func (s *pgServerCPU) read() (time.Duration, error) {
	pst, err := s.postmaster.Stat()
	if err != nil {
		return 0, err
	}
	ticks := pst.UTime + pst.STime + uint(pst.CUTime+pst.CSTime)
	procs, err := procfs.AllProcs()
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil {
			continue // exited meanwhile: counted in the postmaster's children's times once reaped
		}
		if st.PPID == s.postmaster.PID {
			ticks += st.UTime + st.STime
		}
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// cpuMeter measures a step's CPU: this process's, and a local
// PostgreSQL server's when there is one.
type cpuMeter struct {
	server *pgServerCPU // nil: not measured
}

// measureCPU runs step and adds its CPU per turn to the result.
func (m cpuMeter) measureCPU(ctx context.Context, step func() loadResult) loadResult {
	p0 := processCPU()
	var s0 time.Duration
	server := m.server
	if server != nil {
		var err error
		if s0, err = server.read(); err != nil {
			server = nil
		}
	}
	start := time.Now()
	r := step()
	elapsed := time.Since(start)
	if r.Turns == 0 || ctx.Err() != nil {
		return r
	}
	turns := float64(r.Turns)
	busy := processCPU() - p0
	r.CPUMicrosPerTurn = float64(busy.Microseconds()) / turns
	if server != nil {
		// The server's backends report an exiting connection's time only
		// once reaped; those of a step stay open until it ends.
		if s1, err := server.read(); err == nil && s1 >= s0 {
			r.ServerCPUMicrosPerTurn = float64((s1 - s0).Microseconds()) / turns
			busy += s1 - s0
		}
	}
	r.CoresBusy = busy.Seconds() / elapsed.Seconds()
	return r
}

// printCPUBounds says, for each load PostgreSQL ran at beside SQLite,
// what the machine's cores allow at the CPU a PostgreSQL turn took —
// this process's and the server's — against what SQLite's took.
func (r *report) printCPUBounds(w io.Writer) {
	cores := float64(runtime.NumCPU())
	for _, pg := range r.Postgres {
		lite := findLoad(r.Gateway, pg.Clients)
		if pg.Clients <= 1 || lite == nil || pg.ServerCPUMicrosPerTurn <= 0 || lite.CPUMicrosPerTurn <= 0 {
			continue
		}
		perTurn := pg.CPUMicrosPerTurn + pg.ServerCPUMicrosPerTurn
		fmt.Fprintf(w, "\nCPU at %d clients: a postgres turn took %.0f µs of this process (gateway and clients) and %.0f µs of the server, %.0f µs in all, with %.2f of %.0f cores busy: they carry at most %.0f such turns/s (measured %.0f). A sqlite turn took %.0f µs, storage included, with %.2f cores busy (%.0f turns/s).\n",
			pg.Clients, pg.CPUMicrosPerTurn, pg.ServerCPUMicrosPerTurn, perTurn, pg.CoresBusy, cores, cores*1e6/perTurn, pg.PerSecond,
			lite.CPUMicrosPerTurn, lite.CoresBusy, lite.PerSecond)
	}
}
