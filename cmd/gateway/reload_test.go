package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// reloadConfig is the bot.yaml of the reload test; the parts a reload
// changes are filled in.
func reloadConfig(addr, apiURL, reset, tokens, rate, allowed string) string {
	return fmt.Sprintf(`
gateway:
  listen: %s
session:
  max_history: %%s
  reset:
%s
channels:
  websocket:
    auth_tokens:
%s
    rate_limit:
%s
  telegram:
    token: %q
    api_url: %s
    poll_timeout: 1s
    allowed_users: [%s]
log:
  level: info
`, addr, reset, tokens, rate, telegramtest.Token, apiURL, allowed)
}

// dialToken opens a WebSocket connection with a bearer token and says
// hello; it returns the ready frame, or the error frame that refused it.
func dialToken(t *testing.T, addr, token string) (*wsClient, map[string]any) {
	t.Helper()
	h := http.Header{"Authorization": {"Bearer " + token}}
	c, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws", h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.WriteJSON(map[string]any{"type": "hello"})
	cl := readFrames(c)
	select {
	case f, ok := <-cl.frames:
		if !ok {
			return cl, nil
		}
		return cl, f
	case <-time.After(20 * time.Second):
		t.Fatal("no answer to hello")
	}
	return nil, nil
}

// say sends one message and returns the frames up to its reply, or the
// error frame that refused it.
func (cl *wsClient) say(t *testing.T, id, text string) []map[string]any {
	t.Helper()
	cl.c.WriteJSON(map[string]any{"type": "message", "id": id, "text": text})
	var got []map[string]any
	timeout := time.After(20 * time.Second)
	for {
		select {
		case f, ok := <-cl.frames:
			if !ok {
				t.Fatalf("connection closed waiting for the reply to %s", id)
			}
			got = append(got, f)
			if (f["type"] == "reply" && f["reply_to"] == id) || f["type"] == "error" {
				return got
			}
		case <-timeout:
			t.Fatalf("no reply to %s", id)
		}
	}
}

// reloadIn runs the built binary's `gateway reload` in dir, the working
// directory of the gateway it signals (the default pid file is relative
// to it, as the database is).
func reloadIn(t *testing.T, dir, path string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(buildBinary(t), "reload", "-c", path)
	cmd.Dir = dir
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

func last(frames []map[string]any) map[string]any { return frames[len(frames)-1] }

// TestSIGHUPReloadsLive runs the built binary, changes the reset policy,
// max_history, auth tokens, rate limit and Telegram allowlist in bot.yaml
// and reloads (gateway reload, then SIGHUP): connections opened before
// stay open and their next turns use the new values; the Telegram poll goes
// on without a restart. A broken file then changes nothing, is reported as
// file:line, and is counted as a failed reload.
func TestSIGHUPReloadsLive(t *testing.T) {
	api := telegramtest.New(t)
	apiSrv := httptest.NewServer(api)
	defer apiSrv.Close()
	dir := t.TempDir()
	addr := freeAddr(t)

	// alice's conversation has been idle for two hours: kept under reset
	// mode none, archived by the idle policy of the reload.
	ctx := context.Background()
	db, err := store.Open(ctx, store.DriverSQLite, filepath.Join(dir, "gateway.db"), store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour).UTC()
	seeded := sessions.Conversation{ID: "0b7e4d2c-0000-4000-8000-000000000001", SessionKey: sessions.WebSocketKey("alice"),
		Channel: "websocket", Status: sessions.StatusActive, StartedAt: old, LastActivityAt: old, UserID: "alice",
		AgentName: "echo", Model: "echo"}
	if err := db.CreateConversation(ctx, &seeded); err != nil {
		t.Fatal(err)
	}
	db.Close()

	v1 := fmt.Sprintf(reloadConfig(addr, apiSrv.URL,
		"    mode: none",
		"      alice: tok-alice-0123456789\n      carol: tok-carol-0123456789",
		"      per_second: 5\n      burst: 10",
		"1"), "10")
	v2 := fmt.Sprintf(reloadConfig(addr, apiSrv.URL,
		"    mode: idle\n    idle_minutes: 60",
		"      alice: tok-alice-0123456789\n      bob: tok-bob-0123456789ab",
		"      per_second: 0.001\n      burst: 2",
		"2"), "2")
	// Keys read only at start: named in the log, not applied (the test
	// goes on talking to addr, in the old log format).
	v2 = strings.Replace(v2, "  listen: "+addr, "  listen: 127.0.0.1:1", 1)
	v2 = strings.Replace(v2, "  level: info", "  level: info\n  format: json", 1)
	// agent.models turned on: the model frame and Telegram's /model follow.
	v2 += "agent:\n  models:\n    - {name: Fast, model: fast-1}\n"
	p := startGateway(t, dir, v1)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gateway log:\n%s", p.stderr.String())
		}
	})
	// Ready: the pid file is written before readiness turns on
	// (server.markStarted); /healthz answers as soon as it listens.
	waitReadyz(t, "http://"+addr, http.StatusOK, "ready\n")
	path := filepath.Join(dir, "bot.yaml")
	pidFile := filepath.Join(dir, "gateway.pid")
	if data, err := os.ReadFile(pidFile); err != nil || strings.TrimSpace(string(data)) != fmt.Sprint(p.cmd.Process.Pid) {
		t.Fatalf("pid file %s: %q, %v", pidFile, data, err)
	}

	// Before the reload.
	alice, ready := dialToken(t, addr, "tok-alice-0123456789")
	if ready["type"] != "ready" || ready["conversation"] != seeded.ID || ready["models"] != false {
		t.Fatalf("alice's ready = %v, want her idle conversation (reset mode none), and no models", ready)
	}
	carol, ready := dialToken(t, addr, "tok-carol-0123456789")
	if ready["type"] != "ready" {
		t.Fatalf("carol's hello: %v", ready)
	}
	for i := 1; i <= 3; i++ {
		if r := last(carol.say(t, fmt.Sprint("c-", i), fmt.Sprint("hi ", i))); r["type"] != "reply" {
			t.Fatalf("carol's message %d: %v", i, r)
		}
	}
	if r := last(carol.say(t, "c-4", "four")); r["text"] != "echo: four (history: 6)" {
		t.Fatalf("carol's fourth reply under max_history 10: %v", r["text"])
	}
	api.Push(telegramtest.DM(1, "from one"))
	if sent := api.WaitSent(t, 1); !strings.Contains(sent[0].Text, "from one") {
		t.Fatalf("telegram user 1 (allowed) got %q", sent[0].Text)
	}

	// gateway reload signals the process named by the pid file.
	if err := os.WriteFile(path, []byte(v2), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := reloadIn(t, dir, path)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("pid %d", p.cmd.Process.Pid)) {
		t.Fatalf("gateway reload: %d %q %q", code, out, errOut)
	}
	eventually(t, "the reload's log line", func() bool { return strings.Contains(p.stderr.String(), "config reloaded") })
	logs := p.stderr.String()
	if !strings.Contains(logs, "reload: these keys need a restart: gateway.listen, log.format") {
		t.Errorf("the restart keys are not named:\n%s", logs)
	}
	for _, want := range []string{"session.max_history", "session.reset", "agent.models", "channels.websocket.auth_tokens",
		"channels.websocket.rate_limit", "channels.telegram.allowed_users"} {
		if !strings.Contains(logs[strings.Index(logs, "config reloaded"):], want) {
			t.Errorf("the reload's log line does not name %s:\n%s", want, logs)
		}
	}

	// The same connections, the next turns: alice's idle conversation is
	// archived by the new policy; then her bucket holds 2.
	frames := alice.say(t, "a-1", "back")
	var reset map[string]any
	for _, f := range frames {
		if f["type"] == "reset" {
			reset = f
		}
	}
	if reset == nil || reset["reason"] != "idle" || reset["idle_minutes"] != float64(60) || reset["conversation"] == seeded.ID {
		t.Fatalf("alice's first message after the reload: %v, want an idle reset (60 minutes) first", frames)
	}
	if r := last(frames); r["type"] != "reply" || r["text"] != "echo: back (history: 0)" {
		t.Fatalf("alice's reply: %v", r)
	}
	if r := last(alice.say(t, "a-2", "again")); r["type"] != "reply" {
		t.Fatalf("alice's second message (burst 2): %v", r)
	}
	if r := last(alice.say(t, "a-3", "too fast")); r["type"] != "error" || r["code"] != "rate_limited" {
		t.Fatalf("alice's third message (burst 2): %v, want rate_limited", r)
	}
	if r := last(carol.say(t, "c-5", "five")); r["text"] != "echo: five (history: 2)" {
		t.Fatalf("carol's reply under max_history 2: %v", r["text"])
	}
	// New connections need the new tokens; carol's, opened before, stays.
	if _, f := dialToken(t, addr, "tok-carol-0123456789"); f == nil || f["type"] != "error" || f["code"] != "unauthorized" {
		t.Fatalf("a removed token: %v, want unauthorized", f)
	}
	bob, ready := dialToken(t, addr, "tok-bob-0123456789ab")
	if ready["type"] != "ready" || ready["user"] != "bob" || ready["models"] != true {
		t.Fatalf("a new token: %v (models on since the reload)", ready)
	}
	bob.c.WriteJSON(map[string]any{"type": "model", "name": "Fast"})
	select {
	case f := <-bob.frames:
		if f["type"] != "model" || f["chosen"] != "Fast" {
			t.Fatalf("bob's choice of model: %v", f)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no answer to bob's model frame")
	}
	// The Telegram menu is set again, now with /model.
	eventually(t, "the menu with /model", func() bool {
		calls := api.Calls("setMyCommands")
		return len(calls) == 2 && strings.Contains(calls[1].Params.Get("commands"), `"command":"model"`)
	})
	// Telegram: the new allowlist for the next updates.
	api.Push(telegramtest.DM(2, "from two"))
	api.Push(telegramtest.DM(1, "one again"))
	byChat := map[int64]string{}
	for _, m := range api.WaitSent(t, 3)[1:] {
		byChat[m.ChatID] = m.Text
	}
	if !strings.Contains(byChat[2], "from two") || byChat[1] != "Sorry, this bot is private." {
		t.Fatalf("telegram after the reload: %+v", byChat)
	}

	// A broken file: nothing changes, every problem is logged, and the
	// failure counted.
	broken := strings.Replace(v2, "  level: info", "  level: info\n  colour: blue", 1)
	broken = strings.Replace(broken, "idle_minutes: 60", "idle_minutes: soon", 1)
	if err := os.WriteFile(path, []byte(broken), 0o600); err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, "the failed reload", func() bool {
		return metric(t, addr, `chatgate_config_reloads_total{result="failed"}`) == 1
	})
	logs = p.stderr.String()
	for _, want := range []string{path + ":", "colour", "idle_minutes", "reload failed: the running configuration is kept"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the failed reload's log lacks %q:\n%s", want, logs)
		}
	}
	if got := metric(t, addr, `chatgate_config_reloads_total{result="ok"}`); got != 1 {
		t.Fatalf("ok reloads = %v", got)
	}
	if r := last(bob.say(t, "b-1", "still here")); r["type"] != "reply" {
		t.Fatalf("bob after the failed reload: %v", r)
	}
	if _, f := dialToken(t, addr, "tok-carol-0123456789"); f == nil || f["code"] != "unauthorized" {
		t.Fatalf("the failed reload brought back a removed token: %v", f)
	}
	select {
	case err := <-p.exited:
		t.Fatalf("the gateway exited: %v\n%s", err, p.stderr.String())
	default:
	}

	// The poll was never restarted: one getMe, and no poll error logged.
	if n := len(api.Calls("getMe")); n != 1 {
		t.Fatalf("getMe called %d times: the bot reconnected", n)
	}
	if strings.Contains(p.stderr.String(), "getUpdates") {
		t.Fatalf("a poll error was logged:\n%s", p.stderr.String())
	}

	stopGateway(t, p)
	if _, err := os.Stat(pidFile); !os.IsNotExist(err) {
		t.Fatalf("pid file after a clean stop: %v", err)
	}
	os.WriteFile(path, []byte(v2), 0o600)
	code, _, errOut = reloadIn(t, dir, path)
	if code != 1 || !strings.Contains(errOut, "no gateway is running") {
		t.Fatalf("gateway reload with nothing running: %d %q", code, errOut)
	}
}
