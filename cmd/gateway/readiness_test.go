package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/internal/telegramtest"
)

// The listener is up before the Telegram bot has reached the Bot API:
// /healthz answers while getMe hangs, /readyz is 503 until the bot is
// connected, then 200.
func TestListenerStartsBeforeTheBotAPIAnswers(t *testing.T) {
	api := telegramtest.New(t)
	getMe, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	apiSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/getMe") {
			select {
			case getMe <- struct{}{}:
			default:
			}
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		api.ServeHTTP(w, r)
	}))
	defer apiSrv.Close()
	addr := freeAddr(t)
	path := writeConfig(t, fmt.Sprintf("gateway:\n  listen: %s\nstorage:\n  dsn: %s\nchannels:\n  telegram:\n    token: %q\n    api_url: %s\n    poll_timeout: 1s\nlog:\n  level: warn\n",
		addr, filepath.Join(t.TempDir(), "g.db"), telegramtest.Token, apiSrv.URL))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"-c", path}, &bytes.Buffer{}, &stderr) }()

	<-getMe // the bot is waiting for the Bot API, and stays so until released
	waitHealthy(t, "http://"+addr)
	waitReadyz(t, "http://"+addr, http.StatusServiceUnavailable, "telegram: connecting to the Bot API\n")

	once.Do(func() { close(release) })
	waitReadyz(t, "http://"+addr, http.StatusOK, "ready\n")
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr.String())
	}
}

// /readyz names the storage while the database does not answer, and is
// ready again once it does; the gateway then stops cleanly.
func TestReadyzNamesUnreachableStorage(t *testing.T) {
	proxy := pgtest.StartProxy(t, pgtest.DSN(t))
	addr := freeAddr(t)
	p := startGateway(t, t.TempDir(), fmt.Sprintf("gateway:\n  listen: %s\nstorage:\n  driver: postgres\n  dsn: %q\nlog:\n  level: error\n", addr, proxy.DSN))
	base := "http://" + addr
	waitReadyz(t, base, http.StatusOK, "ready\n")

	proxy.Cut()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			// Either the ping failed, or the manager's own calls have
			// failed since a time it names (whichever came first).
			named := strings.HasPrefix(string(body), "storage: ping failed: ") ||
				strings.HasPrefix(string(body), "storage: unreachable since ")
			if !named || strings.Count(string(body), "\n") != 1 {
				t.Fatalf("/readyz with the database gone = %q, want one line naming the storage", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz stayed %d %q with the database gone", resp.StatusCode, body)
		}
		time.Sleep(20 * time.Millisecond) // polling a running process
	}

	proxy.Heal(t)
	waitReadyz(t, base, http.StatusOK, "ready\n")
	stopGateway(t, p)
}

// fakeBot reports its state the way the Telegram bot does.
type fakeBot struct {
	ready bool
	last  error
}

func (b *fakeBot) Ready() bool { return b.ready }
func (b *fakeBot) Err() error  { return b.last }

func TestBotCheck(t *testing.T) {
	const connecting = "connecting to the Bot API"
	for _, c := range []struct {
		bot  *fakeBot
		want string
	}{
		{&fakeBot{ready: true}, ""},
		{&fakeBot{}, connecting},
		{&fakeBot{last: fmt.Errorf("getMe: 502 Bad Gateway")}, connecting + " (last error: getMe: 502 Bad Gateway)"},
		{&fakeBot{ready: true, last: fmt.Errorf("old")}, ""},
	} {
		err := botCheck(c.bot, connecting)()
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("check of %+v = %q, want %q", c.bot, got, c.want)
		}
	}
}
