package main

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/chatgate/chatgate/tools/inproc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatgate/chatgate/sessions"

	"github.com/chatgate/chatgate/config"
	"github.com/chatgate/chatgate/tools"
	"github.com/chatgate/chatgate/tools/mcpclient"
	"github.com/chatgate/chatgate/tools/memtools"
	"github.com/chatgate/chatgate/tools/remindtools"
)

// toolServers turns agent.tools.servers into the MCP client's server
// configurations, in the file's order.
func toolServers(cfg *config.Config) []mcpclient.ServerConfig {
	out := make([]mcpclient.ServerConfig, 0, len(cfg.Agent.Tools.Servers))
	for _, s := range cfg.Agent.Tools.Servers {
		sc := mcpclient.ServerConfig{
			Name:           s.Name,
			Command:        s.Command,
			Args:           slices.Clone(s.Args),
			Env:            maps.Clone(s.Env),
			URL:            s.URL,
			Headers:        maps.Clone(s.Headers),
			Timeout:        s.Timeout.D(),
			MaxResultBytes: int(s.MaxResultBytes),
			Tools:          slices.Clone(s.Tools),
			Approve:        tools.Approve(s.Approve),
			Idempotent:     s.Idempotent,
		}
		if len(s.ToolRules) > 0 {
			sc.PerTool = make(map[string]mcpclient.ToolConfig, len(s.ToolRules))
			for name, r := range s.ToolRules {
				tc := mcpclient.ToolConfig{Approve: tools.Approve(r.Approve)}
				if r.Idempotent != nil {
					v := *r.Idempotent
					tc.Idempotent = &v
				}
				sc.PerTool[name] = tc
			}
		}
		out = append(out, sc)
	}
	return out
}

// toolPolicy returns the servers a turn of a channel and user is offered:
// the channel's session.tools (its policy ladder), less the servers whose
// users allowlist does not name the user, and the gateway's own reminder
// tools (remindtools.ServerName) where the channel's
// session.schedules.enabled allows them, and its memory tools
// (memtools.ServerName) where session.memory.enabled is on for the
// channel or any of its users (the session manager offers them only in
// the turns of a user whose memory is on). A channel the configuration
// does not know gets none.
func toolPolicy(servers []config.ToolServer, policies []config.Policy) func(channel, userID string) []string {
	offered := map[string][]string{}
	reminders, memory := map[string]bool{}, map[string]bool{}
	for _, p := range policies {
		offered[p.Channel] = slices.Clone(p.ToolServers.V)
		reminders[p.Channel] = p.Schedules.Enabled.V
		memory[p.Channel] = p.Memory.Enabled.V
		for _, um := range p.UserMemory {
			memory[p.Channel] = memory[p.Channel] || um.Enabled.V
		}
	}
	byName := map[string]config.ToolServer{}
	for _, s := range servers {
		byName[s.Name] = s
	}
	return func(channel, userID string) []string {
		var out []string
		for _, name := range offered[channel] {
			if s, ok := byName[name]; ok && s.Offers(channel, userID) {
				out = append(out, name)
			}
		}
		if reminders[channel] {
			out = append(out, remindtools.ServerName)
		}
		if memory[channel] && !slices.Contains(out, memtools.ServerName) {
			out = append(out, memtools.ServerName)
		}
		return out
	}
}

// liveTools is toolPolicy of the running servers (agent.tools, read at
// start) and the policies in force: a reload's session.tools reach the
// next turn.
type liveTools struct {
	servers []config.ToolServer
	cur     atomic.Pointer[func(channel, userID string) []string]
}

func newLiveTools(cfg *config.Config) *liveTools {
	lt := &liveTools{servers: cfg.Agent.Tools.Servers}
	lt.follow(cfg)
	return lt
}

// follow takes the policies of a reloaded configuration.
func (lt *liveTools) follow(cfg *config.Config) {
	if lt == nil {
		return
	}
	f := toolPolicy(lt.servers, cfg.Policies())
	lt.cur.Store(&f)
}

// offered is the servers a turn of channel and userID is offered now.
func (lt *liveTools) offered(channel, userID string) []string {
	return (*lt.cur.Load())(channel, userID)
}

// startTools connects the MCP servers of agent.tools, in the background
// (a slow or dead server never holds the gateway's start: its tools are
// offered once it has listed them), and the gateway's own reminder tools
// in the process, and returns what turns offer. The reminder tools are
// always served, and offered where session.schedules.enabled allows, so
// that a reload may turn them on. The servers are stopped when serve
// returns, after the drain.
func (s *server) startTools() sessions.Toolbox {
	cfgs := toolServers(s.cfg)
	if self, err := os.Executable(); err == nil {
		// Each stdio server runs under this binary's tool-exec: it and
		// what it starts die with the gateway (toolexec.go).
		for i := range cfgs {
			if cfgs[i].Command != "" {
				cfgs[i].Supervisor = []string{self, "tool-exec", "-parent", strconv.Itoa(os.Getpid()), "--"}
			}
		}
	} else {
		s.log.Warn("stdio tool servers start without their supervisor", slog.Any("error", err))
	}
	rs, closeReminders, err := reminderServer(func() remindtools.Backend {
		// The session manager is built after its toolbox; no turn runs,
		// and so no tool is called, before it is.
		if s.mgr == nil {
			return nil
		}
		return s.mgr.Reminders()
	})
	if err != nil {
		s.log.Error("reminder tools not served", slog.Any("error", err))
	} else {
		cfgs = append(cfgs, rs)
		// Registered before set.Close, so run after it (onExit runs the
		// newest first): a server closed while the client still runs
		// would end its session, which the client logs as a failure.
		s.onExit(func() { _ = closeReminders() })
	}
	if s.cfg.ServesMemoryTools() {
		ms, closeMemory, err := memoryServer(func() memtools.Backend {
			if s.mgr == nil {
				return nil
			}
			return s.mgr.Memory()
		})
		if err != nil {
			s.log.Error("memory tools not served", slog.Any("error", err))
		} else {
			cfgs = append(cfgs, ms)
			s.onExit(func() { _ = closeMemory() })
		}
	}
	set := mcpclient.New(cfgs, s.log)
	set.Start(context.Background())
	s.tools = set
	s.onExit(set.Close)
	s.liveTools = newLiveTools(s.cfg)
	return mcpclient.Offer{Set: set, Servers: s.liveTools.offered}
}

// reminderServer is the configuration of the gateway's own reminder
// tools (remindtools), served in the process over the backend b gives.
// Their calls run at once, without asking: the user asked for the
// reminder, and session.schedules bounds how many and how often. They are
// idempotent — create is keyed by the call's idempotency key, list reads,
// cancel of a cancelled reminder changes nothing — so a call a crash cut
// runs again rather than leaving the model unsure. They are told the
// turn's session (Caller), which they act for.
func reminderServer(b func() remindtools.Backend) (mcpclient.ServerConfig, func() error, error) {
	return ownServer(remindtools.ServerName, remindtools.NewServer(b), "reminder tools")
}

// ownServer is the configuration of one of the gateway's own servers,
// served in the process: run without asking, idempotent, told the turn's
// caller.
func ownServer(name string, srv *mcp.Server, what string) (mcpclient.ServerConfig, func() error, error) {
	tr, closeFn, err := inproc.Connect(context.Background(), srv, what)
	if err != nil {
		return mcpclient.ServerConfig{}, nil, err
	}
	return mcpclient.ServerConfig{Name: name, Transport: tr, Approve: tools.ApproveAuto, Idempotent: true,
		Caller: true, Timeout: 10 * time.Second}, closeFn, nil
}

// memoryServer is the configuration of the gateway's own memory tools
// (memtools), served in the process over the backend b gives. Their calls
// run at once, without asking: the user sees and may forget every note,
// and session.memory.max_notes bounds them. They are idempotent —
// remember is keyed by the call's idempotency key, recall reads, forget
// of a forgotten note changes nothing — and are told the turn's session
// and user (Caller), whose notes they are.
func memoryServer(b func() memtools.Backend) (mcpclient.ServerConfig, func() error, error) {
	return ownServer(memtools.ServerName, memtools.NewServer(b), "memory tools")
}
