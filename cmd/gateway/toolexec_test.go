package main

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/chatgate/chatgate/cmd/chatgate-mcp-demo/demo"
	"github.com/chatgate/chatgate/internal/llmtest"
)

// A stdio tool server dies with the gateway: the gateway is killed with
// SIGKILL in the middle of a long call, and the server — started by a
// shell, so a grandchild of the server's supervisor, as npx starts node —
// is gone within a second, rather than finishing its call with nobody to
// tell (the demo lingers a minute once its stdin closes, as npm's
// server-everything finishes its long operation). The same holds for the
// shell that started it.
func TestToolServerDiesWithAKilledGateway(t *testing.T) {
	buildBinary(t) // skips in -short
	bin := filepath.Join(t.TempDir(), "chatgate-mcp-demo")
	if out, err := exec.Command("go", "build", "-o", bin, "../chatgate-mcp-demo").CombinedOutput(); err != nil {
		t.Fatalf("go build chatgate-mcp-demo: %v\n%s", err, out)
	}
	dir, addr := t.TempDir(), freeAddr(t)
	pidFile, counts := filepath.Join(dir, "server.pid"), filepath.Join(dir, "counts.json")
	llm := &llmtest.Server{}
	llm.Script(llmtest.ToolThenAnswer("demo__slow", `{"seconds": 300}`))
	srv := httptest.NewServer(llm)
	defer srv.Close()
	p := startGateway(t, dir, fmt.Sprintf(`
gateway:
  listen: %s
agent:
  backend: openai
  openai: {base_url: %s/v1, model: m, max_retries: 0}
  tools:
    servers:
      - name: demo
        command: /bin/sh
        args: ["-c", "echo $$$$ > %s.sh; \"$0\" \"$@\"; echo the server ended >&2", %q, "-pid-file", %q, "-count-file", %q, "-linger", "60s"]
        approve: auto
log:
  level: error
`, addr, srv.URL, pidFile, bin, pidFile, counts))
	waitReadyz(t, "http://"+addr, 200, "ready\n")
	cl, _ := dialClient(t, addr, map[string]any{"user": "ann"})
	cl.c.WriteJSON(map[string]any{"type": "message", "id": "m1", "text": "take your time"})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) { // polling another process's file
		if c, err := demo.ReadCounts(counts); err == nil && c.SlowStarted == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow call never started")
		}
	}
	pids := map[string]int{}
	for name, file := range map[string]string{"server": pidFile, "shell": pidFile + ".sh"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(string(trimSpace(b)))
		if err != nil || syscall.Kill(pid, 0) != nil {
			t.Fatalf("%s pid %q: %v", name, b, err)
		}
		pids[name] = pid
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	killed := time.Now()
	for name, pid := range pids {
		for syscall.Kill(pid, 0) == nil || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			if isZombie(pid) {
				break // dead, waiting for init to reap it
			}
			if time.Since(killed) > time.Second {
				t.Fatalf("the %s (pid %d) still runs a second after the gateway was killed", name, pid)
			}
			time.Sleep(5 * time.Millisecond) // polling another process's end
		}
	}
	t.Logf("server and shell gone %v after the gateway's SIGKILL", time.Since(killed).Round(time.Millisecond))
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

// isZombie reports whether process pid has ended and not been reaped.
func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) S ...: the state follows the command's closing paren.
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' {
			return i+2 < len(b) && b[i+2] == 'Z'
		}
	}
	return false
}
