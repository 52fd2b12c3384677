package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/sessions/store"
)

// A gateway started while another holds its schema's migration lock says
// it waits, and waits, then serves once the lock is let go.
// A stop signal ends the wait: the gateway exits without serving. A
// command (sessions list) says it waits too.
func TestStartWaitsForAnotherGatewaysMigration(t *testing.T) {
	dsn := pgtest.DSN(t)
	release := pgtest.HoldMigration(t, dsn, store.MigrationLockKeyQuery)
	start := func() (*process, string) {
		addr := freeAddr(t)
		p := startGateway(t, t.TempDir(), fmt.Sprintf("gateway:\n  listen: %s\nstorage:\n  driver: postgres\n  dsn: %q\n", addr, dsn))
		eventually(t, "the gateway says it waits for the migration", func() bool {
			return strings.Contains(p.stderr.String(), "another gateway is migrating the schema; waiting for it")
		})
		return p, addr
	}

	stopped, addr := start()
	stopped.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-stopped.exited:
	case <-time.After(time.Minute): // a hang guard
		t.Fatalf("a gateway waiting for a migration did not stop on SIGTERM:\n%s", stopped.stderr.String())
	}
	if !strings.Contains(stopped.stderr.String(), "storage: migrate postgres schema: context canceled") {
		t.Fatalf("a stop while waiting:\n%s", stopped.stderr.String())
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Fatal("a gateway stopped while waiting for the migration served")
	}

	// A command meanwhile says that it waits, and ends when interrupted.
	path := writeConfig(t, fmt.Sprintf("storage:\n  driver: postgres\n  dsn: %q\n", dsn))
	cmdCtx, interrupt := context.WithCancel(context.Background())
	var cmdErr syncBuffer
	code := make(chan int, 1)
	go func() { code <- run(cmdCtx, []string{"sessions", "list", "-c", path}, io.Discard, &cmdErr) }()
	eventually(t, "the command says it waits for the migration", func() bool {
		return strings.Contains(cmdErr.String(), "another gateway is migrating the schema; waiting for it")
	})
	interrupt()
	if c := <-code; c == 0 {
		t.Fatalf("an interrupted command exited 0:\n%s", cmdErr.String())
	}

	p, addr := start()
	release()
	waitHealthy(t, "http://"+addr)
	stopGateway(t, p)
}
