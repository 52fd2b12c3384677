package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAdminReload reloads through POST /admin/api/reload: an admin token
// is needed, a good file applies at once (a new auth token lets its client
// in), a broken one answers 422 with every problem and changes nothing.
func TestAdminReload(t *testing.T) {
	addr := freeAddr(t)
	dir := t.TempDir()
	conf := func(tokens string) string {
		return fmt.Sprintf("gateway:\n  listen: %s\nstorage:\n  dsn: %s\nlog:\n  level: warn\nadmin:\n  tokens:\n    ops: ops-token-0123456789\nchannels:\n  websocket:\n    auth_tokens:\n%s\n",
			addr, filepath.Join(dir, "g.db"), tokens)
	}
	path := filepath.Join(dir, "bot.yaml")
	if err := os.WriteFile(path, []byte(conf("      alice: tok-alice-0123456789")), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr syncBuffer
	go func() { done <- run(ctx, []string{"serve", "-c", path}, &bytes.Buffer{}, &stderr) }()
	t.Cleanup(func() {
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
	base := "http://" + addr
	waitHealthy(t, base)

	if code, _ := request(t, "POST", base+"/admin/api/reload", ""); code != http.StatusUnauthorized {
		t.Fatalf("reload without a token: %d", code)
	}
	if code, _ := request(t, "POST", base+"/admin/api/reload", "tok-alice-0123456789"); code != http.StatusUnauthorized {
		t.Fatalf("reload with a WebSocket token: %d", code)
	}
	if _, f := dialToken(t, addr, "tok-bob-0123456789ab"); f == nil || f["code"] != "unauthorized" {
		t.Fatalf("bob before the reload: %v", f)
	}
	os.WriteFile(path, []byte(conf("      bob: tok-bob-0123456789ab")), 0o600)
	if code, _, errOut := runCmd(t, "reload", "-admin", base, "-token", "wrong-token-0123456789"); code != 1 || !strings.Contains(errOut, "refused the token") {
		t.Fatalf("gateway reload -admin with a wrong token: %d %q", code, errOut)
	}
	if code, out, errOut := runCmd(t, "reload", "-admin", base, "-token", "ops-token-0123456789"); code != 0 {
		t.Fatalf("gateway reload -admin: %d %q %q", code, out, errOut)
	}
	if _, f := dialToken(t, addr, "tok-bob-0123456789ab"); f["type"] != "ready" || f["user"] != "bob" {
		t.Fatalf("bob after the reload: %v", f)
	}

	os.WriteFile(path, []byte(conf("      bob: short")+"extra: 1\n"), 0o600)
	code, body := request(t, "POST", base+"/admin/api/reload", "ops-token-0123456789")
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, path+":14:") || !strings.Contains(body, "extra") {
		t.Fatalf("broken reload: %d %s", code, body)
	}
	if _, f := dialToken(t, addr, "tok-bob-0123456789ab"); f["type"] != "ready" {
		t.Fatalf("bob after the refused reload: %v", f)
	}
	if code, _, errOut := runCmd(t, "reload", "-admin", base, "-token", "ops-token-0123456789"); code != 1 || !strings.Contains(errOut, "extra") {
		t.Fatalf("gateway reload -admin of a broken file: %d %q", code, errOut)
	}
	if got := metric(t, addr, `chatgate_config_reloads_total{result="failed"}`); got != 2 {
		t.Fatalf("failed reloads = %v", got)
	}
}
