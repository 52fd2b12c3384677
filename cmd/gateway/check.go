package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/chatgate/chatgate/config"
	"github.com/chatgate/chatgate/tools/mcpclient"
)

// check validates a configuration and prints each channel's effective
// policy with where every value came from. Errors go to stderr as
// file:line: key: message, one per line, and the exit code is 1. A valid
// file's tool servers are then started once each (unless -tools=false):
// one that cannot start within its timeout is a warning, as the gateway
// runs without it and keeps trying.
func check(args []string, stdout, stderr io.Writer) int {
	fs, path := configFlag("check", stderr)
	try := fs.Bool("tools", true, "start each tool server of agent.tools once, within its timeout, and warn about those that cannot start")
	cfg, code := parseConfig(fs, path, args, stderr)
	if cfg == nil {
		return code
	}
	fmt.Fprintf(stdout, "%s: ok\n", cfg.File)
	fmt.Fprintf(stdout, "storage %s, agent %s, listening on %s\n", cfg.Storage.Driver, cfg.Agent.Backend, cfg.Gateway.Listen)
	if *try {
		tryTools(cfg, stdout)
	}
	fmt.Fprintln(stdout)
	cfg.Describe(stdout)
	return 0
}

// tryTools starts every tool server of agent.tools once, as serve does,
// waits for each to list its tools (within its timeout), prints a line
// per server, and warns (Config.Warn) about each that could not start:
// the command is not found or exits, the URL does not answer as an MCP
// server, or nothing was listed in time. The servers are stopped before
// it returns.
func tryTools(cfg *config.Config, stdout io.Writer) {
	cfgs := toolServers(cfg)
	if len(cfgs) == 0 {
		return
	}
	said := &lastSaid{mu: &sync.Mutex{}, lines: map[string]string{}}
	set := mcpclient.New(cfgs, slog.New(said))
	set.Start(context.Background())
	set.WaitStarting(nil)
	statuses := set.Servers()
	set.Close() // (its processes' stderr is read to the end by now)
	index := map[string]int{}
	for i, s := range cfg.Agent.Tools.Servers {
		index[s.Name] = i
	}
	for _, st := range statuses {
		key := fmt.Sprintf("agent.tools.servers[%d]", index[st.Name])
		if st.Connected {
			fmt.Fprintf(stdout, "tool server %s: started, %d tools\n", st.Name, st.Tools)
			continue
		}
		timeout := cfgs[index[st.Name]].Timeout
		if timeout == 0 {
			timeout = mcpclient.DefaultTimeout
		}
		why := strings.TrimSpace(st.LastError)
		switch {
		case why == "": // (its first try outlived the wait)
			why = fmt.Sprintf("it did not answer within its timeout (%s)", timeout)
		case strings.Contains(why, context.DeadlineExceeded.Error()):
			why = fmt.Sprintf("it did not answer within its timeout (%s): %s", timeout, why)
		}
		if line := said.last(st.Name); line != "" {
			why += fmt.Sprintf(" (its last line on stderr: %q)", line)
		}
		fmt.Fprintf(stdout, "tool server %s: cannot start\n", st.Name)
		cfg.Warn(key, "tool server %q cannot start: %s; the gateway runs without its tools and keeps trying", st.Name, why)
	}
}

// lastSaid is a log handler keeping the last line each stdio tool server
// wrote on its stderr (mcpclient logs them as "tool server stderr"), to
// say why a server that exits did: "Cannot find module …" tells more
// than the closed connection it leaves. Everything else is dropped.
type lastSaid struct {
	mu     *sync.Mutex
	lines  map[string]string // server → its last line
	server string            // the server of this handler's logger
}

func (h *lastSaid) Enabled(context.Context, slog.Level) bool { return true }

func (h *lastSaid) Handle(_ context.Context, r slog.Record) error {
	if r.Message != mcpclient.StderrMessage || h.server == "" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "line" {
			h.lock()
			h.lines[h.server] = cutLine(a.Value.String())
			h.unlock()
		}
		return true
	})
	return nil
}

func (h *lastSaid) WithAttrs(attrs []slog.Attr) slog.Handler {
	next := *h
	for _, a := range attrs {
		if a.Key == mcpclient.ServerLogKey {
			next.server = a.Value.String()
		}
	}
	return &next
}

func (h *lastSaid) WithGroup(string) slog.Handler { return h }

func (h *lastSaid) lock()   { h.mu.Lock() }
func (h *lastSaid) unlock() { h.mu.Unlock() }

// last is the last line server wrote on its stderr; "" if none.
func (h *lastSaid) last(server string) string {
	h.lock()
	defer h.unlock()
	return h.lines[server]
}

// cutLine keeps a warning short: a server's line is cut to 200 bytes.
func cutLine(s string) string {
	if len(s) > 200 {
		s = strings.ToValidUTF8(s[:200], "") + "…"
	}
	return s
}
