package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A normal stop ends the gateway's own tool servers (reminders, memory)
// after the MCP client is closed, not before: the client never sees their
// sessions end, and logs nothing about it.
func TestStopLogsNothingAboutTheOwnToolServers(t *testing.T) {
	addr := freeAddr(t)
	path := writeConfig(t, fmt.Sprintf("gateway:\n  listen: %s\nstorage:\n  dsn: %s\nsession:\n  memory: {enabled: true}\nlog:\n  level: info\n",
		addr, filepath.Join(t.TempDir(), "g.db")))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"serve", "-c", path}, &bytes.Buffer{}, &stderr) }()
	base := "http://" + addr
	waitHealthy(t, base)
	waitReadyz(t, base, http.StatusOK, "ready\n")
	cancel() // as SIGTERM
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exited %d: %s", code, stderr.String())
		}
	case <-time.After(60 * time.Second): // a hang guard, not a speed check
		t.Fatal("serve did not stop")
	}
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, "mcp_server=") && (strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR")) {
			t.Errorf("a normal stop logged: %s", line)
		}
	}
}
