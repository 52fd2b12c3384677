// Package mcpclient connects the gateway to MCP servers (the official Go
// SDK) and runs their tools for the model: it lists each server's tools
// at start and again when the server says its list changed, offers them
// as function tools named server__tool (tools.Separator), and calls them
// with a timeout, a cap on the result's size and an idempotency key in
// the request's _meta (tools.MetaKey).
//
// A Set holds one supervisor per server. Start returns at once; each
// supervisor opens a session in the background (a stdio server is
// started as a process, a streamable HTTP server is reached at its URL
// with the configured headers), lists the tools (every page, only those
// the allowlist names) and then waits: on list_changed it lists again,
// and when the session ends (the process exited, the connection broke)
// it opens a new one after a backoff that doubles from 0.5 s to 30 s and
// starts over once a session lasted a minute. Meanwhile the server offers
// no tools and its calls fail as not connected; its last listing still
// answers Rule, so a call stored before the restart keeps its rule.
//
// Call tells apart what the model should hear from what failed: a tool's
// error result, an error the server answered with and arguments that are
// not a JSON object are tools.Results with IsError (the model can correct
// itself); an unknown tool, a server that is down, a timeout, a
// cancellation (the server is sent notifications/cancelled) or a broken
// transport are errors.
//
// Whether a call may run (approval), who is offered which servers (the
// policy ladder) and whether a call runs once (the turn ledger) are the
// session manager's and the gateway's: this package only runs what it is
// asked to. Offer narrows a Set to the servers a channel's user gets and
// implements the session manager's Toolbox.
package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatgate/chatgate/agent"

	"github.com/chatgate/chatgate/tools"
)

// Errors of Call, wrapped with the tool's and the server's names.
var (
	ErrUnknownTool  = errors.New("unknown tool")
	ErrNotConnected = errors.New("tool server not connected")
)

// ServerStatus is how one server is doing, for readiness and the admin.
type ServerStatus struct {
	Name string
	// Connected: a session is open and the server's tools were listed.
	Connected bool
	Tools     int // tools offered (after the allowlist)
	Connects  int // sessions opened so far: a restart counts
	PID       int // a stdio server's process while its session is open
	// LastError is why the last start failed or the last session ended
	// ("" if none did).
	LastError string
}

// Set is the gateway's MCP servers: it keeps a session open to each,
// knows their tools and runs calls. It is safe for concurrent use.
type Set struct {
	log     *slog.Logger
	servers map[string]*server
	backoff backoff

	mu      sync.Mutex
	changed chan struct{} // closed and replaced when a server's state changes
	started bool
	closed  bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// server is one MCP server and its session. The fields below mu are
// guarded by Set.mu.
type server struct {
	cfg     ServerConfig
	invalid error // the configuration's problems: never started
	client  *mcp.Client
	relist  chan struct{} // the server said its tool list changed
	log     *slog.Logger  // scrubbed of the URL's secrets
	scrub   *scrubber     // hides the URL's secrets in errors (nil: none)

	session  *mcp.ClientSession
	listed   bool                // the open session's tools were listed
	offered  []agent.Tool        // sorted by name
	known    map[string]struct{} // the tools of the last listing, by their names at the server
	connects int
	pid      int
	lastErr  error
}

// New returns the servers' Set, not yet started. A server whose
// configuration is invalid (see Validate) is never started; its status
// says why.
func New(cfgs []ServerConfig, logger *slog.Logger) *Set {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Set{
		log:     logger,
		servers: make(map[string]*server, len(cfgs)),
		backoff: defaultBackoff,
		changed: make(chan struct{}),
	}
	for _, c := range cfgs {
		if _, dup := s.servers[c.Name]; dup {
			logger.Error("tool server configured twice; the first is used", slog.String("mcp_server", c.Name))
			continue
		}
		sc := newScrubber(c.URL)
		sv := &server{
			cfg:    c.withDefaults(),
			relist: make(chan struct{}, 1),
			log:    sc.logger(logger).With(slog.String(ServerLogKey, c.Name)),
			scrub:  sc,
		}
		if errs := c.problems(); len(errs) > 0 {
			sv.invalid = errors.Join(errs...)
			sv.lastErr = sv.invalid
			sv.log.Error("tool server not started: invalid configuration", slog.Any("error", sv.invalid))
		}
		sv.client = mcp.NewClient(&mcp.Implementation{Name: "chatgate", Version: version()}, &mcp.ClientOptions{
			Logger:       sv.log,
			Capabilities: &mcp.ClientCapabilities{}, // no roots, sampling or elicitation
			ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
				// Listing from inside a notification's handler would wait on
				// the connection that runs it: the session's lister does.
				select {
				case sv.relist <- struct{}{}:
				default:
				}
			},
		})
		s.servers[c.Name] = sv
	}
	return s
}

// Start opens a session to every server in the background and returns
// at once: a slow or dead server never holds the gateway's start. A
// server that fails is retried with backoff until ctx ends or Close.
func (s *Set) Start(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.closed {
		return
	}
	s.started = true
	ctx, s.cancel = context.WithCancel(ctx)
	for _, sv := range s.servers {
		if sv.invalid != nil {
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			// A parent-death signal is sent when the thread that started
			// the process ends, not the gateway: the server's processes are
			// started from a thread kept for them, until the server is no
			// longer supervised.
			runtime.LockOSThread()
			s.supervise(ctx, sv)
		}()
	}
}

// Close ends every session, stops the stdio servers' processes and
// waits for them.
func (s *Set) Close() {
	s.mu.Lock()
	s.closed = true
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.wg.Wait()
}

// Tools are the tools the named servers offer now (servers nil: all
// servers), named server__tool and sorted by name. A server whose
// session is down offers none. Parameters are shared: read them only.
func (s *Set) Tools(servers []string) []agent.Tool {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []agent.Tool
	add := func(sv *server) {
		if sv != nil && sv.listed {
			out = append(out, sv.offered...)
		}
	}
	if servers == nil {
		for _, sv := range s.servers {
			add(sv)
		}
	} else {
		for _, name := range servers {
			add(s.servers[name])
		}
	}
	slices.SortFunc(out, func(a, b agent.Tool) int { return strings.Compare(a.Name, b.Name) })
	return slices.CompactFunc(out, func(a, b agent.Tool) bool { return a.Name == b.Name })
}

// tools.Rule is how the tool of that name (server__tool) is run; false when
// its server did not list it. A server whose session is down keeps its
// last listing here, so a call stored before a restart still has its
// rule (and fails as not connected).
func (s *Set) Rule(name string) (tools.Rule, bool) {
	sv, tool := s.lookup(name)
	if sv == nil {
		return tools.Rule{}, false
	}
	s.mu.Lock()
	_, ok := sv.known[tool]
	s.mu.Unlock()
	if !ok {
		return tools.Rule{}, false
	}
	return sv.cfg.rule(tool), true
}

// Call runs the tool of that name (server__tool) with the model's JSON
// arguments ("" is {}) and the idempotency key in the request's _meta
// (under tools.MetaKey), within the server's timeout.
//
// Arguments that are not a JSON object, and an error the server answers
// with, are the model's to know: a tools.Result with IsError. A call that
// could not run or got no answer is an error wrapping ErrUnknownTool,
// ErrNotConnected, context.DeadlineExceeded (the timeout),
// context.Canceled (ctx) or the transport's failure.
func (s *Set) Call(ctx context.Context, name, arguments, key string) (tools.Result, error) {
	sv, tool := s.lookup(name)
	if sv == nil {
		return tools.Result{}, fmt.Errorf("call %s: no such server: %w", name, ErrUnknownTool)
	}
	s.mu.Lock()
	cs, listed := sv.session, sv.listed
	_, known := sv.known[tool]
	s.mu.Unlock()
	switch {
	case cs == nil || !listed:
		return tools.Result{}, fmt.Errorf("call %s: server %s: %w", name, sv.cfg.Name, ErrNotConnected)
	case !known:
		return tools.Result{}, fmt.Errorf("call %s: server %s does not offer %s: %w", name, sv.cfg.Name, tool, ErrUnknownTool)
	}
	args, err := parseArguments(arguments)
	if err != nil {
		return tools.Result{IsError: true, Text: fmt.Sprintf("The call of %s did not run: its arguments %v.", name, err)}, nil
	}
	params := &mcp.CallToolParams{Name: tool, Arguments: args}
	if key != "" {
		params.Meta = mcp.Meta{tools.MetaKey: key}
	}
	if c, ok := tools.CallerOf(ctx); ok && sv.cfg.Caller {
		if params.Meta == nil {
			params.Meta = mcp.Meta{}
		}
		params.Meta[tools.MetaSessionKey], params.Meta[tools.MetaChannel], params.Meta[tools.MetaUserID] = c.SessionKey, c.Channel, c.UserID
		if c.Scheduled {
			params.Meta[tools.MetaScheduled] = true
		}
		if c.ConversationID != "" {
			params.Meta[tools.MetaConv], params.Meta[tools.MetaSeq] = c.ConversationID, c.MessageSeq
		}
	}
	callCtx, cancel := context.WithTimeout(ctx, sv.cfg.Timeout)
	defer cancel()
	res, err := cs.CallTool(callCtx, params)
	var rpcErr *jsonrpc.Error
	switch {
	case err == nil:
		return render(res, sv.cfg.MaxResultBytes), nil
	case ctx.Err() != nil:
		return tools.Result{}, fmt.Errorf("call %s: server %s: %w", name, sv.cfg.Name, context.Cause(ctx))
	case callCtx.Err() != nil:
		return tools.Result{}, fmt.Errorf("call %s: no answer from server %s within %s: %w", name, sv.cfg.Name, sv.cfg.Timeout, context.DeadlineExceeded)
	case errors.As(err, &rpcErr):
		text, cut := cut(fmt.Sprintf("The server %s answered with an error: %s", sv.cfg.Name, rpcErr.Message), sv.cfg.MaxResultBytes)
		return tools.Result{IsError: true, Text: text, Cut: cut}, nil
	default:
		return tools.Result{}, fmt.Errorf("call %s: server %s: %w", name, sv.cfg.Name, sv.scrub.err(err))
	}
}

// parseArguments checks that the model's arguments are a JSON object
// and keeps its values as they were written (numbers exactly).
func parseArguments(arguments string) (map[string]json.RawMessage, error) {
	if strings.TrimSpace(arguments) == "" {
		return map[string]json.RawMessage{}, nil
	}
	if !json.Valid([]byte(arguments)) {
		return nil, errors.New("are not valid JSON")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(arguments), &obj); err != nil || obj == nil {
		return nil, errors.New("are not a JSON object")
	}
	return obj, nil
}

func (s *Set) lookup(name string) (*server, string) {
	srv, tool, ok := strings.Cut(name, tools.Separator)
	if !ok || tool == "" {
		return nil, ""
	}
	return s.servers[srv], tool
}

// Servers is every configured server's status, sorted by name.
func (s *Set) Servers() []ServerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ServerStatus, 0, len(s.servers))
	for _, sv := range s.servers {
		out = append(out, sv.status())
	}
	slices.SortFunc(out, func(a, b ServerStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (sv *server) status() ServerStatus {
	st := ServerStatus{Name: sv.cfg.Name, Connected: sv.listed, Connects: sv.connects, PID: sv.pid}
	if sv.listed {
		st.Tools = len(sv.offered)
	}
	if sv.lastErr != nil {
		st.LastError = sv.lastErr.Error()
	}
	return st
}

// WaitFor waits until the named server's status meets cond, or ctx
// ends.
func (s *Set) WaitFor(ctx context.Context, server string, cond func(ServerStatus) bool) error {
	for {
		s.mu.Lock()
		sv := s.servers[server]
		if sv == nil {
			s.mu.Unlock()
			return fmt.Errorf("tool server %s is not configured", server)
		}
		st, changed := sv.status(), s.changed
		s.mu.Unlock()
		if cond(st) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("tool server %s: %w (connected %t, last error %q)", server, ctx.Err(), st.Connected, st.LastError)
		}
	}
}

// WaitListed waits until the named server is connected and its tools
// are listed, or ctx ends.
func (s *Set) WaitListed(ctx context.Context, server string) error {
	return s.WaitFor(ctx, server, func(st ServerStatus) bool { return st.Connected })
}

// WaitTried waits until the named server's first session was tried:
// its tools were listed, or its start failed (it is retried in the
// background), or ctx ends. Each try is bounded by the server's timeout.
// A server that is not configured was tried.
func (s *Set) WaitTried(ctx context.Context, server string) error {
	s.mu.Lock()
	_, ok := s.servers[server]
	s.mu.Unlock()
	if !ok {
		return nil
	}
	return s.WaitFor(ctx, server, func(st ServerStatus) bool { return st.Connected || st.LastError != "" })
}

// WaitStarting waits until each named server (nil: every one) was
// tried once — its tools listed, or its first start failed — each within
// its own timeout, which bounds a try. A turn that starts while a server
// is still starting waits for its listing instead of going without its
// tools; a server that cannot start holds it no longer than its timeout.
func (s *Set) WaitStarting(servers []string) {
	s.mu.Lock()
	var waits []*server
	for name, sv := range s.servers {
		if servers != nil && !slices.Contains(servers, name) {
			continue
		}
		if st := sv.status(); !st.Connected && st.LastError == "" {
			waits = append(waits, sv)
		}
	}
	s.mu.Unlock()
	for _, sv := range waits {
		ctx, cancel := context.WithTimeout(context.Background(), sv.cfg.Timeout+startSlack)
		_ = s.WaitTried(ctx, sv.cfg.Name)
		cancel()
	}
}

// startSlack is what a server's first try may take beyond its timeout:
// starting its process and opening its session.
const startSlack = time.Second

// Starting names the servers whose first try is not over (neither
// listed nor failed), sorted: what /readyz waits for.
func (s *Set) Starting() []string {
	var out []string
	for _, st := range s.Servers() {
		if !st.Connected && st.LastError == "" {
			out = append(out, st.Name)
		}
	}
	return out
}

// update changes a server's state under the lock and wakes its waiters.
func (s *Set) update(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
	close(s.changed)
	s.changed = make(chan struct{})
}

// toolName is what function names may be at the model's API.
var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// list lists the session's tools (every page) and offers the allowed
// ones. One session's listings run one at a time.
func (s *Set) list(ctx context.Context, sv *server, cs *mcp.ClientSession) error {
	ctx, cancel := context.WithTimeout(ctx, sv.cfg.Timeout)
	defer cancel()
	var offered []agent.Tool
	known := map[string]struct{}{}
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("list tools: %w", err)
		}
		if !sv.cfg.allows(t.Name) {
			continue
		}
		name := sv.cfg.Name + tools.Separator + t.Name
		if !toolName.MatchString(name) {
			sv.log.Warn("tool not offered: its name is not one a model can call", slog.String("tool", name))
			continue
		}
		known[t.Name] = struct{}{}
		offered = append(offered, agent.Tool{Name: name, Description: t.Description, Parameters: objectSchema(t.InputSchema)})
	}
	slices.SortFunc(offered, func(a, b agent.Tool) int { return strings.Compare(a.Name, b.Name) })
	for _, t := range sv.cfg.Tools {
		if _, ok := known[t]; !ok {
			sv.log.Warn("allowed tool not listed by the server", slog.String("tool", t))
		}
	}
	s.update(func() {
		if sv.session != cs {
			return
		}
		sv.offered, sv.known, sv.listed = offered, known, true
	})
	sv.log.Info("tool server listed its tools", slog.Int("tools", len(offered)))
	return nil
}

// objectSchema is a tool's input schema as the model's API wants it: a
// JSON object of "type": "object", copied so no two listings share it.
func objectSchema(in any) map[string]any {
	var m map[string]any
	if b, err := json.Marshal(in); err == nil {
		_ = json.Unmarshal(b, &m)
	}
	if m == nil {
		m = map[string]any{}
	}
	m["type"] = "object"
	if _, ok := m["properties"]; !ok {
		m["properties"] = map[string]any{}
	}
	return m
}

// backoff is how long a failed server waits before its next start.
type backoff struct {
	min, max time.Duration
	// stable: a session that lasted this long starts the backoff over.
	stable time.Duration
}

var defaultBackoff = backoff{min: 500 * time.Millisecond, max: 30 * time.Second, stable: time.Minute}

// next is the wait after a session (or start) that lasted up, when the
// wait before it was prev (0: none yet).
func (b backoff) next(prev, up time.Duration) time.Duration {
	if prev == 0 || up >= b.stable {
		return b.min
	}
	return min(prev*2, b.max)
}
