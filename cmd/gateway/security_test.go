package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// serveConfig runs serve with config until the test ends or stop is
// called, whichever comes first; either way the test fails unless serve
// then exits 0.
func serveConfig(t *testing.T, config string) (stop func()) {
	t.Helper()
	path := writeConfig(t, config)
	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"serve", "-c", path}, &bytes.Buffer{}, &stderr) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case code := <-done:
				if code != 0 {
					t.Errorf("serve exited %d: %s", code, stderr.String())
				}
			case <-time.After(60 * time.Second): // a hang guard, not a speed check
				t.Error("serve did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func status(t *testing.T, url, auth string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A listener beyond loopback without auth tokens is refused at start with
// a message naming allow_anonymous; with it set, the gateway serves.
func TestServeRefusesOpenListenerWithoutTokens(t *testing.T) {
	dir := t.TempDir()
	_, port, _ := net.SplitHostPort(freeAddr(t))
	cfg := fmt.Sprintf("gateway:\n  listen: 0.0.0.0:%s\nstorage:\n  dsn: %s\nlog:\n  level: warn\n", port, filepath.Join(dir, "g.db"))
	path := writeConfig(t, cfg)
	// A hang guard: were the file not refused, serve would run until the
	// context ends, and exit 0.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errb bytes.Buffer
	code := run(ctx, []string{"serve", "-c", path}, &bytes.Buffer{}, &errb)
	errOut := errb.String()
	if code == 0 || !strings.Contains(errOut, "allow_anonymous") || !strings.Contains(errOut, path+":2: gateway.listen") {
		t.Fatalf("serve on 0.0.0.0 without tokens: exit %d\n%s", code, errOut)
	}
	serveConfig(t, cfg+"channels:\n  websocket:\n    allow_anonymous: true\n")
	waitHealthy(t, "http://127.0.0.1:"+port)
}

// metrics.token guards /metrics on the main listener; metrics.listen moves
// it to a listener of its own.
func TestServeMetricsProtection(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	serveConfig(t, fmt.Sprintf("gateway:\n  listen: %s\nstorage:\n  dsn: %s\nmetrics:\n  token: metrics-token-0123456789\nlog:\n  level: warn\n", addr, filepath.Join(dir, "g.db")))
	waitHealthy(t, "http://"+addr)
	if got := status(t, "http://"+addr+"/metrics", ""); got != http.StatusUnauthorized {
		t.Fatalf("unauthenticated scrape: %d, want 401", got)
	}
	if got := status(t, "http://"+addr+"/metrics", "metrics-token-0123456789"); got != http.StatusOK {
		t.Fatalf("scrape with the token: %d", got)
	}

	addr2, maddr := freeAddr(t), freeAddr(t)
	serveConfig(t, fmt.Sprintf("gateway:\n  listen: %s\nstorage:\n  dsn: %s\nmetrics:\n  listen: %s\nlog:\n  level: warn\n", addr2, filepath.Join(dir, "g2.db"), maddr))
	waitHealthy(t, "http://"+addr2)
	if got := status(t, "http://"+addr2+"/metrics", ""); got != http.StatusNotFound {
		t.Fatalf("/metrics on the main listener with metrics.listen: %d, want 404", got)
	}
	if got := status(t, "http://"+maddr+"/metrics", ""); got != http.StatusOK {
		t.Fatalf("/metrics on metrics.listen: %d", got)
	}
}

// gateway sessions purge runs the retention purge at once: an expired
// resume token goes, a live one stays.
func TestSessionsPurgeCommand(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "g.db")
	db, err := store.Open(ctx, store.DriverSQLite, dbPath, store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := sessions.New(db, agent.Echo{}, sessions.Options{ResumeTTL: time.Hour})
	live, err := m.Conversations().NewResumeToken(ctx, "websocket", "ann")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Conversations().Open(ctx, sessions.Inbound{Channel: "websocket", SessionKey: sessions.WebSocketKey("ann"), UserID: "ann"}, -1, 10); err != nil {
		t.Fatal(err)
	}
	if err := db.SetState(ctx, "websocket:resume:old", `{"principal":"ann","issued":"2020-01-01T00:00:00Z"}`); err != nil {
		t.Fatal(err)
	}
	m.Shutdown(ctx)
	db.Close()

	path := writeConfig(t, fmt.Sprintf("storage:\n  dsn: %s\n", dbPath))
	code, out, errOut := runCmd(t, "sessions", "purge", "-c", path)
	if code != 0 || !strings.Contains(out, "purged 0 conversations") || !strings.Contains(out, ", 1 channel states") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	db, err = store.Open(ctx, store.DriverSQLite, dbPath, store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	m = sessions.New(db, agent.Echo{}, sessions.Options{ResumeTTL: time.Hour})
	defer m.Shutdown(ctx)
	if p, err := m.Conversations().ResumePrincipal(ctx, "websocket", live); err != nil || p != "ann" {
		t.Fatalf("the live token after the purge: %q, %v", p, err)
	}
	if v, _ := db.GetState(ctx, "websocket:resume:old"); v != "" {
		t.Fatalf("the expired binding is still there: %s", v)
	}
}
