package mcpclient_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/mcptest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/tools"
	"github.com/chatgate/chatgate/tools/mcpclient"
)

var _ sessions.Toolbox = mcpclient.Offer{}

// inMemory starts a Set of one in-memory test server named "t", waits
// until it has listed its tools and closes it when the test ends.
func inMemory(t *testing.T, edit func(*mcpclient.ServerConfig)) (*mcpclient.Set, *mcptest.Server) {
	t.Helper()
	srv, tr := mcptest.InMemory(t)
	cfg := mcpclient.ServerConfig{Name: "t", Transport: tr}
	if edit != nil {
		edit(&cfg)
	}
	set := mcpclient.New([]mcpclient.ServerConfig{cfg}, nil)
	set.Start(t.Context())
	t.Cleanup(set.Close)
	if err := set.WaitListed(waitCtx(t), "t"); err != nil {
		t.Fatal(err)
	}
	return set, srv
}

// waitCtx bounds a wait for an event the test expects.
func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func names(ts []agent.Tool) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return out
}

func TestToolsListsTheAllowedToolsAsServerTool(t *testing.T) {
	set, _ := inMemory(t, func(c *mcpclient.ServerConfig) { c.Tools = []string{"echo", "slow", "missing"} })
	got := set.Tools(nil)
	if want := []string{"t__echo", "t__slow"}; fmt.Sprint(names(got)) != fmt.Sprint(want) {
		t.Fatalf("tools %v, want %v", names(got), want)
	}
	echo := got[0]
	if echo.Description != "Answers the text it is given." {
		t.Errorf("description %q", echo.Description)
	}
	if echo.Parameters["type"] != "object" {
		t.Errorf("schema type %v", echo.Parameters["type"])
	}
	props, _ := echo.Parameters["properties"].(map[string]any)
	if _, ok := props["text"]; !ok {
		t.Errorf("schema %v has no property text", echo.Parameters)
	}
	if got := set.Tools([]string{"other"}); len(got) != 0 {
		t.Errorf("tools of an unknown server: %v", names(got))
	}
	if got := set.Tools([]string{}); len(got) != 0 {
		t.Errorf("tools of no server: %v", names(got))
	}
	if _, ok := set.Rule("t__counter"); ok {
		t.Error("a tool the allowlist leaves out has a rule")
	}
	if _, err := set.Call(t.Context(), "t__counter", "", "k"); !errors.Is(err, mcpclient.ErrUnknownTool) {
		t.Errorf("call of a tool left out: %v, want ErrUnknownTool", err)
	}
	st := set.Servers()
	if len(st) != 1 || !st[0].Connected || st[0].Tools != 2 || st[0].Connects != 1 || st[0].LastError != "" {
		t.Errorf("status %+v", st)
	}
}

func TestRuleIsTheServerDefaultWithTheToolsOverrides(t *testing.T) {
	yes, no := true, false
	set, _ := inMemory(t, func(c *mcpclient.ServerConfig) {
		c.Approve = tools.ApproveAuto
		c.Idempotent = true
		c.Timeout = 7 * time.Second
		c.PerTool = map[string]mcpclient.ToolConfig{
			"counter": {Approve: tools.ApproveAsk, Idempotent: &no},
			"echo":    {Idempotent: &yes},
			"fail":    {Approve: tools.ApproveDeny},
		}
	})
	for _, tc := range []struct {
		name       string
		approve    tools.Approve
		idempotent bool
	}{
		{"t__counter", tools.ApproveAsk, false},
		{"t__echo", tools.ApproveAuto, true},
		{"t__fail", tools.ApproveDeny, true},
		{"t__slow", tools.ApproveAuto, true},
	} {
		r, ok := set.Rule(tc.name)
		want := tools.Rule{Server: "t", Tool: strings.TrimPrefix(tc.name, "t__"), Approve: tc.approve, Idempotent: tc.idempotent, Timeout: 7 * time.Second}
		if !ok || r != want {
			t.Errorf("Rule(%s) = %+v, %t; want %+v", tc.name, r, ok, want)
		}
	}
	for _, name := range []string{"t__nope", "x__echo", "echo", "t__"} {
		if _, ok := set.Rule(name); ok {
			t.Errorf("Rule(%s) found", name)
		}
	}
}

func TestDefaultRuleAsksAndIsNotIdempotent(t *testing.T) {
	set, _ := inMemory(t, nil)
	r, ok := set.Rule("t__echo")
	if want := (tools.Rule{Server: "t", Tool: "echo", Approve: tools.ApproveAsk, Timeout: mcpclient.DefaultTimeout}); !ok || r != want {
		t.Fatalf("rule %+v, want %+v", r, want)
	}
}

func TestCallEchoCarriesTheKeyInMeta(t *testing.T) {
	set, srv := inMemory(t, nil)
	res, err := set.Call(t.Context(), "t__echo", `{"text":"héllo"}`, "turn-1/call-1")
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "héllo" || res.IsError || res.Cut || res.Media != nil {
		t.Fatalf("result %+v", res)
	}
	calls := srv.Calls()
	if len(calls) != 1 || calls[0].Meta[tools.MetaKey] != "turn-1/call-1" {
		t.Fatalf("calls %+v: want one with the key in _meta", calls)
	}
}

func TestCallWithoutArgumentsSendsAnEmptyObject(t *testing.T) {
	set, srv := inMemory(t, nil)
	res, err := set.Call(t.Context(), "t__counter", "", "")
	if err != nil || res.Text != "1" || res.IsError {
		t.Fatalf("result %+v, %v", res, err)
	}
	calls := srv.Calls()
	if string(calls[0].Arguments) != "{}" {
		t.Errorf("arguments %s, want {}", calls[0].Arguments)
	}
	if _, ok := calls[0].Meta[tools.MetaKey]; ok {
		t.Errorf("meta %v has a key though none was given", calls[0].Meta)
	}
}

func TestInvalidArgumentsAreTheModelsError(t *testing.T) {
	set, srv := inMemory(t, nil)
	for _, args := range []string{`{"text":`, `[1]`, `null`, `"x"`} {
		res, err := set.Call(t.Context(), "t__echo", args, "k")
		if err != nil || !res.IsError || !strings.Contains(res.Text, "t__echo did not run") {
			t.Errorf("arguments %s: result %+v, %v", args, res, err)
		}
	}
	// Proof the server is reached at all, then that nothing else came.
	if _, err := set.Call(t.Context(), "t__echo", `{"text":"x"}`, ""); err != nil {
		t.Fatal(err)
	}
	if calls := srv.Calls(); len(calls) != 1 {
		t.Errorf("the server saw %d calls, want only the valid one", len(calls))
	}
}

func TestArgumentsTheSchemaRefusesAreTheModelsError(t *testing.T) {
	set, _ := inMemory(t, nil)
	res, err := set.Call(t.Context(), "t__echo", `{"text": 5}`, "")
	if err != nil || !res.IsError || res.Text == "" {
		t.Fatalf("result %+v, %v: want an error result for the model", res, err)
	}
}

func TestToolErrorIsAResult(t *testing.T) {
	set, _ := inMemory(t, nil)
	res, err := set.Call(t.Context(), "t__fail", `{"message":"disk full"}`, "")
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || res.Text != "failed: disk full" {
		t.Fatalf("result %+v", res)
	}
}

func TestTimeoutIsAnErrorWrappingDeadlineExceeded(t *testing.T) {
	set, srv := inMemory(t, func(c *mcpclient.ServerConfig) { c.Timeout = 50 * time.Millisecond })
	_, err := set.Call(t.Context(), "t__slow", `{}`, "")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want DeadlineExceeded", err)
	}
	if !strings.Contains(err.Error(), "t__slow") || !strings.Contains(err.Error(), "server t") {
		t.Errorf("error %q does not name the tool and server", err)
	}
	// The server was told: its call ended cancelled.
	if err := srv.Await(waitCtx(t), func(c []mcptest.Call) bool { return len(c) == 1 && c[0].Cancelled }); err != nil {
		t.Fatal(err)
	}
}

func TestCancelEndsTheCallAtTheServer(t *testing.T) {
	set, srv := inMemory(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := set.Call(ctx, "t__slow", `{}`, "")
		errc <- err
	}()
	if err := srv.Started(waitCtx(t), mcptest.Slow, 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("error %v, want Canceled", err)
		}
	case <-waitCtx(t).Done():
		t.Fatal("the call did not return after its context was cancelled")
	}
	if err := srv.Await(waitCtx(t), func(c []mcptest.Call) bool { return c[0].Cancelled }); err != nil {
		t.Fatal(err)
	}
}

func TestBigResultIsCutAtARuneWithANote(t *testing.T) {
	set, _ := inMemory(t, func(c *mcpclient.ServerConfig) { c.MaxResultBytes = 101 })
	res, err := set.Call(t.Context(), "t__big", `{"bytes": 400, "char": "é"}`, "")
	if err != nil {
		t.Fatal(err)
	}
	if !res.Cut {
		t.Fatalf("result not cut: %d bytes", len(res.Text))
	}
	body, note, ok := strings.Cut(res.Text, "\n")
	if !ok || body != strings.Repeat("é", 50) || note != "[result cut: 100 of 400 bytes shown]" {
		t.Fatalf("result %q", res.Text)
	}
	if !utf8.ValidString(res.Text) {
		t.Error("cut inside a rune")
	}
	res, err = set.Call(t.Context(), "t__big", `{"bytes": 101}`, "")
	if err != nil || res.Cut || len(res.Text) != 101 {
		t.Errorf("a result of exactly the cap: cut %t, %d bytes, %v", res.Cut, len(res.Text), err)
	}
}

func TestListChangedOffersTheNewTool(t *testing.T) {
	set, srv := inMemory(t, nil)
	srv.AddTool("weather", "Tells the weather.")
	ctx := waitCtx(t)
	if err := set.WaitFor(ctx, "t", func(st mcpclient.ServerStatus) bool { return st.Tools == 7 }); err != nil {
		t.Fatal(err)
	}
	got := set.Tools(nil)
	if fmt.Sprint(names(got)) != "[t__big t__counter t__echo t__fail t__media t__slow t__weather]" {
		t.Fatalf("tools %v", names(got))
	}
	res, err := set.Call(t.Context(), "t__weather", `{"where":"Oslo"}`, "")
	if err != nil || res.Text != `weather: {"where":"Oslo"}` {
		t.Fatalf("result %+v, %v", res, err)
	}
	srv.RemoveTool("weather")
	if err := set.WaitFor(ctx, "t", func(st mcpclient.ServerStatus) bool { return st.Tools == 6 }); err != nil {
		t.Fatal(err)
	}
	if _, ok := set.Rule("t__weather"); ok {
		t.Error("a removed tool still has a rule")
	}
}

func TestUnknownServerAndTool(t *testing.T) {
	set, _ := inMemory(t, nil)
	for _, name := range []string{"x__echo", "echo", "t__nope"} {
		if _, err := set.Call(t.Context(), name, "", ""); !errors.Is(err, mcpclient.ErrUnknownTool) {
			t.Errorf("Call(%s): %v, want ErrUnknownTool", name, err)
		}
	}
}

func TestSessionEndedMeansNotConnected(t *testing.T) {
	srv, tr := mcptest.InMemory(t)
	set := mcpclient.New([]mcpclient.ServerConfig{{Name: "t", Transport: tr}}, nil)
	set.Start(t.Context())
	t.Cleanup(set.Close)
	ctx := waitCtx(t)
	if err := set.WaitListed(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	for ss := range srv.MCP.Sessions() {
		_ = ss.Close()
	}
	if err := set.WaitFor(ctx, "t", func(st mcpclient.ServerStatus) bool { return !st.Connected && st.LastError != "" }); err != nil {
		t.Fatal(err)
	}
	if _, err := set.Call(t.Context(), "t__echo", `{"text":"x"}`, ""); !errors.Is(err, mcpclient.ErrNotConnected) {
		t.Fatalf("error %v, want ErrNotConnected", err)
	}
	if got := set.Tools(nil); len(got) != 0 {
		t.Errorf("a server that is down offers %v", names(got))
	}
	if _, ok := set.Rule("t__echo"); !ok {
		t.Error("a server that is down lost its last listing's rules")
	}
}

func TestOfferNarrowsByTheServersOfTheChannel(t *testing.T) {
	a, ta := mcptest.InMemory(t)
	_, tb := mcptest.InMemory(t)
	set := mcpclient.New([]mcpclient.ServerConfig{
		{Name: "a", Transport: ta, Tools: []string{"echo"}},
		{Name: "b", Transport: tb, Tools: []string{"counter"}},
	}, nil)
	set.Start(t.Context())
	t.Cleanup(set.Close)
	for _, n := range []string{"a", "b"} {
		if err := set.WaitListed(waitCtx(t), n); err != nil {
			t.Fatal(err)
		}
	}
	var box sessions.Toolbox = mcpclient.Offer{Set: set, Servers: func(channel, user string) []string {
		switch channel {
		case "web":
			return []string{"a", "b"}
		case "tg":
			return []string{"a"}
		}
		return nil
	}}
	for ch, want := range map[string]string{"web": "[a__echo b__counter]", "tg": "[a__echo]", "none": "[]"} {
		if got := fmt.Sprint(names(box.Offered(ch, "u"))); got != want {
			t.Errorf("Offered(%s) = %s, want %s", ch, got, want)
		}
	}
	if got := fmt.Sprint(names(mcpclient.Offer{Set: set}.Offered("x", "u"))); got != "[a__echo b__counter]" {
		t.Errorf("Offer without Servers offers %s, want all", got)
	}
	if r, ok := box.Rule(t.Context(), "web", "u", "a__echo"); !ok || r.Server != "a" {
		t.Errorf("Rule %+v %t", r, ok)
	}
	// The rule follows the offer: a tool of a server the channel's user
	// does not get has none, whatever the model names.
	for _, c := range []struct{ channel, tool string }{{"tg", "b__counter"}, {"none", "a__echo"}, {"web", "b__nosuch"}, {"web", "b"}, {"web", "b__"}} {
		if r, ok := box.Rule(t.Context(), c.channel, "u", c.tool); ok {
			t.Errorf("Rule(%s, %s) = %+v: a tool not offered has a rule", c.channel, c.tool, r)
		}
	}
	if res, err := box.Call(t.Context(), "a__echo", `{"text":"hi"}`, "k"); err != nil || res.Text != "hi" {
		t.Errorf("Call %+v %v", res, err)
	}
	if c := a.Calls(); len(c) != 1 || c[0].Meta[tools.MetaKey] != "k" {
		t.Errorf("calls %+v", c)
	}
}

func TestStartNeverWaitsForAServer(t *testing.T) {
	set := mcpclient.New([]mcpclient.ServerConfig{
		{Name: "dead", Command: "/nonexistent/mcp-server"},
		{Name: "bad__name", Command: "x"},
	}, nil)
	set.Start(t.Context()) // returns at once: the test would hang otherwise
	t.Cleanup(set.Close)
	ctx := waitCtx(t)
	if err := set.WaitFor(ctx, "dead", func(st mcpclient.ServerStatus) bool { return st.LastError != "" }); err != nil {
		t.Fatal(err)
	}
	st := set.Servers()
	if len(st) != 2 || st[0].Name != "bad__name" || !strings.Contains(st[0].LastError, "name") || st[1].Connected {
		t.Fatalf("status %+v", st)
	}
	if _, err := set.Call(t.Context(), "dead__x", "", ""); !errors.Is(err, mcpclient.ErrNotConnected) {
		t.Errorf("call on a dead server: %v", err)
	}
}

// lateTransport connects once open is closed: a server still starting.
type lateTransport struct {
	mcp.Transport
	open chan struct{}
}

func (l lateTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	select {
	case <-l.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return l.Transport.Connect(ctx)
}

// A gateway just started may run a turn stored before it stopped while
// its servers still start: the rule of that turn's call waits for its
// server's first try, so an idempotent tool's call is known as such. A
// server that failed to start is not waited for beyond its try.
func TestOfferRuleWaitsForAServerStillStarting(t *testing.T) {
	_, tr := mcptest.InMemory(t)
	open := make(chan struct{})
	set := mcpclient.New([]mcpclient.ServerConfig{
		{Name: "t", Transport: lateTransport{Transport: tr, open: open}, Idempotent: true},
		{Name: "dead", Command: "/nonexistent/mcp-server"},
	}, nil)
	set.Start(t.Context())
	t.Cleanup(set.Close)
	box := mcpclient.Offer{Set: set}
	// The delay only gives a Rule that did not wait the time to answer
	// wrong; a Rule that waits answers right whatever it is.
	go func() {
		time.Sleep(100 * time.Millisecond)
		close(open)
	}()
	if r, ok := box.Rule(waitCtx(t), "web", "u", "t__echo"); !ok || !r.Idempotent {
		t.Errorf("Rule of a server that lists late: %+v %t, want its idempotent rule", r, ok)
	}
	if _, ok := box.Rule(waitCtx(t), "web", "u", "dead__x"); ok {
		t.Error("Rule of a server that failed to start: known")
	}
	if _, ok := box.Rule(waitCtx(t), "web", "u", "none__x"); ok {
		t.Error("Rule of a server not configured: known")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	stuck := mcpclient.New([]mcpclient.ServerConfig{{Name: "s", Transport: lateTransport{Transport: tr, open: make(chan struct{})}}}, nil)
	stuck.Start(t.Context())
	t.Cleanup(stuck.Close)
	if _, ok := (mcpclient.Offer{Set: stuck}).Rule(ctx, "web", "u", "s__echo"); ok {
		t.Error("Rule with its context ended: known")
	}
}

// A call's caller (the turn's session) goes in _meta only to a server
// marked Caller — the gateway's own in-process ones: a session key is the
// user's identity, not for a server outside.
func TestCallerReachesOnlyServersMarkedCaller(t *testing.T) {
	ctx := tools.WithCaller(t.Context(), tools.Caller{SessionKey: "telegram:dm:7", Channel: "telegram", UserID: "7"})
	for _, marked := range []bool{false, true} {
		set, srv := inMemory(t, func(c *mcpclient.ServerConfig) { c.Caller = marked })
		if _, err := set.Call(ctx, "t__echo", `{"text":"x"}`, "k"); err != nil {
			t.Fatal(err)
		}
		meta := srv.Calls()[0].Meta
		got := []any{meta[tools.MetaSessionKey], meta[tools.MetaChannel], meta[tools.MetaUserID]}
		switch {
		case marked && (got[0] != "telegram:dm:7" || got[1] != "telegram" || got[2] != "7" || meta[tools.MetaKey] != "k"):
			t.Fatalf("a Caller server got _meta %v", meta)
		case !marked && (got[0] != nil || got[1] != nil || got[2] != nil):
			t.Fatalf("a server outside got the caller in _meta %v", meta)
		}
	}
}
