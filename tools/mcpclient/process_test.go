package mcpclient_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chatgate/chatgate/cmd/chatgate-mcp-demo/demo"
	"github.com/chatgate/chatgate/tools/mcpclient"
)

// demoBinary builds chatgate-mcp-demo into the test's directory.
func demoBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "chatgate-mcp-demo")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/chatgate/chatgate/cmd/chatgate-mcp-demo").CombinedOutput()
	if err != nil {
		t.Fatalf("build the demo server: %v\n%s", err, out)
	}
	return bin
}

// eventually waits until cond holds, looking again every few
// milliseconds, or fails the test when ctx ends. It is for what only a
// file shows (another process's work), never for time to pass.
func eventually(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}

func counts(t *testing.T, file string) demo.Counts {
	t.Helper()
	c, err := demo.ReadCounts(file)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func call(t *testing.T, set *mcpclient.Set, name, args string) string {
	t.Helper()
	res, err := set.Call(t.Context(), name, args, "")
	if err != nil || res.IsError {
		t.Fatalf("%s: %+v, %v", name, res, err)
	}
	return res.Text
}

func TestStdioServerIsRestartedAfterItIsKilled(t *testing.T) {
	bin, dir := demoBinary(t), t.TempDir()
	countFile, notesFile := filepath.Join(dir, "counts"), filepath.Join(dir, "notes")
	set := mcpclient.New([]mcpclient.ServerConfig{{
		Name:    "demo",
		Command: bin,
		Args:    []string{"-count-file", countFile},
		Env:     map[string]string{"CHATGATE_DEMO_NOTES": notesFile},
	}}, nil)
	set.Start(t.Context())
	t.Cleanup(set.Close)
	ctx := waitCtx(t)
	if err := set.WaitListed(ctx, "demo"); err != nil {
		t.Fatal(err)
	}
	if got := names(set.Tools(nil)); len(got) != 6 || got[0] != "demo__chart" {
		t.Fatalf("tools %v", got)
	}
	call(t, set, "demo__counter", "")
	if got := call(t, set, "demo__counter", ""); got != "2" {
		t.Fatalf("counter: %q", got)
	}
	if c := counts(t, countFile); c.Counter != 2 {
		t.Fatalf("counts %+v", c)
	}
	call(t, set, "demo__notes_add", `{"text":"from the gateway"}`)
	if b, err := os.ReadFile(notesFile); err != nil || string(b) != "from the gateway\n" {
		t.Fatalf("notes file (set by the server's env): %q, %v", b, err)
	}

	// Kill the process while a call runs in it.
	first := set.Servers()[0]
	errc := make(chan error, 1)
	go func() {
		_, err := set.Call(t.Context(), "demo__slow", `{"seconds": 300}`, "")
		errc <- err
	}()
	eventually(ctx, t, "slow started", func() bool { return counts(t, countFile).SlowStarted == 1 })
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			t.Fatalf("the call in a killed server: %v, want the transport's failure", err)
		}
	case <-ctx.Done():
		t.Fatal("the call in a killed server did not return")
	}

	if err := set.WaitFor(ctx, "demo", func(st mcpclient.ServerStatus) bool { return st.Connects == 2 && st.Connected }); err != nil {
		t.Fatal(err)
	}
	again := set.Servers()[0]
	if again.PID == first.PID || again.PID == 0 || again.LastError == "" {
		t.Errorf("after the restart: %+v (before: %+v)", again, first)
	}
	if got := call(t, set, "demo__counter", ""); got != "3" {
		t.Fatalf("counter after the restart: %q", got)
	}
	if c := counts(t, countFile); c != (demo.Counts{Counter: 3, SlowStarted: 1}) {
		t.Errorf("counts %+v: the killed call ran again or counter ran more than asked", c)
	}
}

func TestCloseStopsTheStdioServer(t *testing.T) {
	set := mcpclient.New([]mcpclient.ServerConfig{{Name: "demo", Command: demoBinary(t)}}, nil)
	set.Start(t.Context())
	defer set.Close()
	if err := set.WaitListed(waitCtx(t), "demo"); err != nil {
		t.Fatal(err)
	}
	pid := set.Servers()[0].PID
	set.Close()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("process %d after Close: %v, want it gone", pid, err)
	}
	if st := set.Servers()[0]; st.Connected || st.PID != 0 {
		t.Errorf("status after Close: %+v", st)
	}
}

func TestStreamableHTTPSendsTheHeaders(t *testing.T) {
	var mu sync.Mutex
	var auth []string
	h := demo.Handler(demo.New(demo.Options{}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	set := mcpclient.New([]mcpclient.ServerConfig{{
		Name:    "web",
		URL:     srv.URL,
		Headers: map[string]string{"Authorization": "Bearer s3cret"},
	}}, nil)
	set.Start(t.Context())
	t.Cleanup(set.Close)
	if err := set.WaitListed(waitCtx(t), "web"); err != nil {
		t.Fatal(err)
	}
	if got := call(t, set, "web__counter", ""); got != "1" {
		t.Fatalf("counter: %q", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(auth) < 2 {
		t.Fatalf("requests %d: want at least the connection's and the call's", len(auth))
	}
	for i, a := range auth {
		if a != "Bearer s3cret" {
			t.Errorf("request %d: Authorization %q", i, a)
		}
	}
}

// A turn's offer made while a server is still starting waits for its
// listing; a server that cannot start holds it no longer than its first
// try, and is offered nothing.
func TestOfferWaitsForAStartingServer(t *testing.T) {
	set := mcpclient.New([]mcpclient.ServerConfig{
		{Name: "demo", Command: demoBinary(t), Args: []string{"-start-delay", "700ms"}},
		{Name: "broken", Command: filepath.Join(t.TempDir(), "no-such-server"), Timeout: 2 * time.Second},
	}, nil)
	set.Start(t.Context())
	defer set.Close()
	if starting := set.Starting(); len(starting) == 0 {
		t.Fatal("no server starting right after Start")
	}
	offered := mcpclient.Offer{Set: set}.Offered("websocket", "ann")
	var names []string
	for _, tool := range offered {
		names = append(names, tool.Name)
	}
	if !slices.Contains(names, "demo__notes_add") || slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "broken__") }) {
		t.Fatalf("offered %v", names)
	}
	if starting := set.Starting(); len(starting) != 0 {
		t.Fatalf("still starting after the offer: %v", starting)
	}
}
