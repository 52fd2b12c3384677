package mcpclient

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatgate/chatgate/tools"
)

// Defaults of a ServerConfig.
const (
	DefaultTimeout        = 30 * time.Second
	DefaultMaxResultBytes = 16 << 10
	DefaultApprove        = tools.ApproveAsk
)

// ServerConfig is one MCP server. Exactly one of Command, URL and
// Transport says how to reach it.
type ServerConfig struct {
	// Name is the server's part of its tools' names (server__tool):
	// letters, digits, '-' and '_', no "__", not ending in '_'.
	Name string

	// Command, Args and Env: a stdio server, started and supervised by
	// the gateway; restarted with backoff whenever it exits. Env is added
	// to the gateway's environment.
	Command string
	Args    []string
	Env     map[string]string

	// URL and Headers: a streamable HTTP server; the headers (such as
	// Authorization) go with every request. A session that ends is opened
	// again with backoff.
	URL     string
	Headers map[string]string
	// Supervisor, for a stdio server, is a command its command and
	// arguments are appended to, which runs it in a process group of its
	// own and ends that group when the gateway dies (the gateway's
	// "tool-exec"); it is started with a parent-death signal. Empty: the
	// server is started directly, and killed when the gateway dies.
	Supervisor []string

	// Transport is an explicit transport (the gateway's own in-process
	// servers, and tests: the SDK's in-memory one). It is connected once
	// and never restarted.
	Transport mcp.Transport
	// Caller passes each call's tools.Caller (the turn's session) in the
	// request's _meta. Only for the gateway's own in-process servers:
	// a session key is the user's identity, not for servers outside.
	Caller bool

	// Timeout bounds each call (and a connection's start and listing);
	// 0 means DefaultTimeout.
	Timeout time.Duration
	// MaxResultBytes caps the text the model gets of a result; 0 means
	// DefaultMaxResultBytes.
	MaxResultBytes int
	// Tools allows only these of the server's tools; empty allows all.
	Tools []string
	// tools.Approve is the default for the server's tools; empty means
	// DefaultApprove.
	Approve tools.Approve
	// Idempotent is the default for the server's tools: a call started
	// but never answered may run again.
	Idempotent bool
	// PerTool overrides tools.Approve and Idempotent for single tools, by the
	// tool's name at the server.
	PerTool map[string]ToolConfig
}

// ToolConfig overrides a server's defaults for one tool.
type ToolConfig struct {
	Approve    tools.Approve // empty: the server's
	Idempotent *bool         // nil: the server's
}

var serverName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)

// Validate returns every problem of the servers' configuration, joined,
// or nil.
func Validate(cfgs []ServerConfig) error {
	var errs []error
	seen := map[string]bool{}
	for i, c := range cfgs {
		name := c.Name
		if name == "" {
			name = fmt.Sprintf("#%d", i+1)
		}
		for _, err := range c.problems() {
			errs = append(errs, fmt.Errorf("tool server %s: %w", name, err))
		}
		if c.Name != "" && seen[c.Name] {
			errs = append(errs, fmt.Errorf("tool server %s: the name is used twice", name))
		}
		seen[c.Name] = true
	}
	return errors.Join(errs...)
}

func (c ServerConfig) problems() []error {
	var errs []error
	switch {
	case c.Name == "":
		errs = append(errs, errors.New("name is missing"))
	case !serverName.MatchString(c.Name) || strings.Contains(c.Name, tools.Separator) || strings.HasSuffix(c.Name, "_"):
		errs = append(errs, fmt.Errorf("name %q: use letters, digits, '-' and '_', no %q, not ending in '_'", c.Name, tools.Separator))
	}
	n := 0
	for _, set := range []bool{c.Command != "", c.URL != "", c.Transport != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		errs = append(errs, errors.New("set exactly one of command and url"))
	}
	if c.URL == "" && len(c.Headers) > 0 {
		errs = append(errs, errors.New("headers need a url"))
	}
	if c.Command == "" && (len(c.Args) > 0 || len(c.Env) > 0) {
		errs = append(errs, errors.New("args and env need a command"))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %s is negative", c.Timeout))
	}
	if c.MaxResultBytes < 0 {
		errs = append(errs, fmt.Errorf("max result bytes %d is negative", c.MaxResultBytes))
	}
	if !validApprove(c.Approve) {
		errs = append(errs, fmt.Errorf("approve %q: use auto, ask or deny", c.Approve))
	}
	for tool, tc := range c.PerTool {
		if !validApprove(tc.Approve) {
			errs = append(errs, fmt.Errorf("tool %s: approve %q: use auto, ask or deny", tool, tc.Approve))
		}
	}
	return errs
}

func validApprove(a tools.Approve) bool {
	switch a {
	case "", tools.ApproveAuto, tools.ApproveAsk, tools.ApproveDeny:
		return true
	}
	return false
}

// withDefaults fills what the configuration left zero.
func (c ServerConfig) withDefaults() ServerConfig {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxResultBytes == 0 {
		c.MaxResultBytes = DefaultMaxResultBytes
	}
	if c.Approve == "" {
		c.Approve = DefaultApprove
	}
	return c
}

// rule is how the server's tool is run: the server's defaults with the
// tool's overrides.
func (c ServerConfig) rule(tool string) tools.Rule {
	r := tools.Rule{Server: c.Name, Tool: tool, Approve: c.Approve, Idempotent: c.Idempotent, Timeout: c.Timeout}
	if tc, ok := c.PerTool[tool]; ok {
		if tc.Approve != "" {
			r.Approve = tc.Approve
		}
		if tc.Idempotent != nil {
			r.Idempotent = *tc.Idempotent
		}
	}
	return r
}

// allows reports whether the allowlist lets the model see the tool.
func (c ServerConfig) allows(tool string) bool {
	return len(c.Tools) == 0 || slices.Contains(c.Tools, tool)
}
