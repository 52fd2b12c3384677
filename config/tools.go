package config

import (
	"fmt"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Defaults and bounds of agent.tools.
const (
	DefaultMaxToolRounds   = 8
	MaxMaxToolRounds       = 64
	DefaultApproveTimeout  = 10 * time.Minute
	MinApproveTimeout      = time.Second
	DefaultToolTimeout     = 30 * time.Second
	DefaultToolResultBytes = 16 << 10
	// DefaultToolMediaBytes and DefaultToolMediaItems bound the media a
	// call keeps (agent.tools.media); MaxToolMediaBytes is the most
	// max_bytes may be, MaxToolMediaItems the most max_items may be.
	DefaultToolMediaBytes = 10 << 20
	DefaultToolMediaItems = 8
	MaxToolMediaBytes     = 50 << 20
	MaxToolMediaItems     = 32
	MinToolResultBytes    = 1 << 10
	MaxToolResultBytes    = 1 << 20
	// MaxToolServerName keeps server__tool within the 64 characters
	// chat-completions servers allow a function's name.
	MaxToolServerName = 32
)

// Approval modes of agent.tools.servers[].approve and tool_rules.
const (
	ApproveAuto = "auto"
	ApproveAsk  = "ask"
	ApproveDeny = "deny"
)

// ReminderToolServer is the name of the gateway's own server of reminder
// tools (offered where session.schedules.enabled allows): no configured
// server may take it.
const ReminderToolServer = "reminders"

// MemoryToolServer is the name of the gateway's own server of memory
// tools (offered where session.memory.enabled is on). A configured server
// may keep the name while memory is off everywhere (the gateway then
// serves no memory tools); with memory on, it is an error.
const MemoryToolServer = "memory"

// toolSeparator joins a server's name and its tool's in the name the model
// sees; a server's name must not contain it.
const toolSeparator = "__"

var (
	toolServerNameRE = regexp.MustCompile(`^[a-z0-9_-]+$`)
	headerNameRE     = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	envNameRE        = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func (c *Config) applyToolDefaults() {
	if c.Agent.Tools.Media.MaxBytes == 0 {
		c.Agent.Tools.Media.MaxBytes = DefaultToolMediaBytes
	}
	if c.Agent.Tools.Media.MaxItems == 0 {
		c.Agent.Tools.Media.MaxItems = DefaultToolMediaItems
	}
	for i := range c.Agent.Tools.Servers {
		s := &c.Agent.Tools.Servers[i]
		if s.Timeout == 0 {
			s.Timeout = Duration(DefaultToolTimeout)
		}
		if s.MaxResultBytes == 0 {
			s.MaxResultBytes = DefaultToolResultBytes
		}
		if s.Approve == "" {
			s.Approve = ApproveAsk
		}
	}
}

// ToolServerNames lists the configured servers' names, in the file's order
// (a name given twice, an error, once).
func (c *Config) ToolServerNames() []string {
	names := make([]string, 0, len(c.Agent.Tools.Servers))
	for _, s := range c.Agent.Tools.Servers {
		if s.Name != "" && !slices.Contains(names, s.Name) {
			names = append(names, s.Name)
		}
	}
	return names
}

// validateTools checks agent.tools; the servers a session block names are
// checked with it (validateSessionTools).
func (c *Config) validateTools() Errors {
	var errs Errors
	bad := func(path, format string, args ...any) { errs = append(errs, c.errAt(path, format, args...)) }
	t := c.Agent.Tools
	if t.MaxRounds != nil && (*t.MaxRounds < 1 || *t.MaxRounds > MaxMaxToolRounds) {
		bad("agent.tools.max_rounds", "must be 1–%d, got %d", MaxMaxToolRounds, *t.MaxRounds)
	}
	if t.ApproveTimeout != nil && t.ApproveTimeout.D() < MinApproveTimeout {
		bad("agent.tools.approve_timeout", "must be at least %s, got %s", MinApproveTimeout, t.ApproveTimeout.D())
	}
	if m := t.Media.MaxBytes; m < 0 || m > MaxToolMediaBytes {
		bad("agent.tools.media.max_bytes", "must be 1 byte–50MiB, got %d", m)
	}
	if m := t.Media.MaxItems; m < 0 || m > MaxToolMediaItems {
		bad("agent.tools.media.max_items", "must be 1–%d, got %d", MaxToolMediaItems, m)
	}
	named := map[string]string{} // name → path of the server that has it
	for i, s := range t.Servers {
		p := fmt.Sprintf("agent.tools.servers[%d]", i)
		switch {
		case s.Name == "" && !isBroken(c.broken, p+".name"):
			e := c.errAt(p+".name", "required: the server's name, which prefixes its tools' names (name__tool)")
			if e.Line == 0 {
				e.Line = c.lines[p] // the key is missing: the server's own line
			}
			errs = append(errs, e)
		case s.Name == "":
		case !toolServerNameRE.MatchString(s.Name):
			bad(p+".name", "%q may only have a–z, 0–9, _ and -", s.Name)
		case strings.Contains(s.Name, toolSeparator):
			bad(p+".name", "%q contains %q, which joins a server's name to its tools' names (name__tool)", s.Name, toolSeparator)
		case s.Name == ReminderToolServer:
			bad(p+".name", "%q is the name of the gateway's own reminder tools (session.schedules): choose another", s.Name)
		case s.Name == MemoryToolServer && c.MemoryOn():
			bad(p+".name", "%q is the name of the gateway's own memory tools, and session.memory.enabled is on: choose another", s.Name)
		case len(s.Name) > MaxToolServerName:
			bad(p+".name", "%q is longer than %d characters (the model sees name__tool, at most 64 characters)", s.Name, MaxToolServerName)
		case named[s.Name] != "":
			bad(p+".name", "%q is already the name of %s (%s)", s.Name, named[s.Name], c.where(named[s.Name]))
		default:
			named[s.Name] = p
		}
		errs = append(errs, c.validateToolServer(p, s)...)
	}
	return errs
}

func (c *Config) validateToolServer(p string, s ToolServer) Errors {
	var errs Errors
	bad := func(key, format string, args ...any) { errs = append(errs, c.errAt(join(p, key), format, args...)) }
	label := "this server"
	if s.Name != "" {
		label = fmt.Sprintf("server %q", s.Name)
	}
	unread := func(key string) bool { return isBroken(c.broken, p+"."+key) }
	switch {
	case s.Command == "" && s.URL == "":
		if !unread("command") && !unread("url") {
			errs = append(errs, c.errAt(p, "%s needs command (a program the gateway starts, spoken to over stdio) or url (a streamable HTTP endpoint)", label))
		}
	case s.Command != "" && s.URL != "":
		bad("url", "%s has both command (%s) and url: give one of them", label, c.where(p+".command"))
	}
	if s.Command != "" && strings.TrimSpace(s.Command) != s.Command {
		bad("command", "%q has spaces around it (arguments go in args)", s.Command)
	}
	if s.URL != "" {
		if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("url", "%q is not an http(s) URL", RedactURL(s.URL))
		}
		if len(s.Args) > 0 {
			bad("args", "is for a server started by command; %s has a url", label)
		}
		if len(s.Env) > 0 {
			bad("env", "is for a server started by command; %s has a url", label)
		}
	}
	if s.Command != "" && len(s.Headers) > 0 {
		bad("headers", "are for a server reached by url; %s is started by command", label)
	}
	for _, k := range sortedKeys(s.Env) {
		if !envNameRE.MatchString(k) {
			bad("env."+k, "%q is not an environment variable name (letters, digits and _, not starting with a digit)", k)
		}
	}
	for _, k := range sortedKeys(s.Headers) {
		if !headerNameRE.MatchString(k) {
			bad("headers."+k, "%q is not an HTTP header name", k)
		}
	}
	if s.Timeout < 0 {
		bad("timeout", "must not be negative")
	}
	if n := int64(s.MaxResultBytes); n < MinToolResultBytes || n > MaxToolResultBytes {
		bad("max_result_bytes", "must be between 1KiB and 1MiB (as bytes, or with KiB or MiB: \"16KiB\"), got %d", n)
	}
	if !validApprove(s.Approve) {
		bad("approve", "%q is not one of auto, ask, deny", s.Approve)
	}
	seen := map[string]bool{}
	for i, name := range s.Tools {
		switch {
		case strings.TrimSpace(name) == "":
			bad(fmt.Sprintf("tools[%d]", i), "a tool's name must not be empty")
		case seen[name]:
			bad(fmt.Sprintf("tools[%d]", i), "%q is listed twice", name)
		}
		seen[name] = true
	}
	for i, u := range s.Users {
		if strings.TrimSpace(u) == "" || strings.TrimSpace(u) != u {
			bad(fmt.Sprintf("users[%d]", i), "%q is not a user: a Telegram user id or a WebSocket principal, bare or as telegram:<id> or websocket:<principal>", u)
		}
	}
	for _, tool := range sortedKeys(s.ToolRules) {
		r := s.ToolRules[tool]
		rp := "tool_rules." + tool
		if len(s.Tools) > 0 && !seen[tool] && !unread("tools") {
			msg := fmt.Sprintf("%q is not in the tools allowlist of %s (%s)", tool, label, strings.Join(s.Tools, ", "))
			if sg := suggest(tool, s.Tools); sg != "" {
				msg += fmt.Sprintf("; did you mean %q?", sg)
			}
			bad(rp, "%s", msg)
		}
		if r.Approve != "" && !validApprove(r.Approve) {
			bad(rp+".approve", "%q is not one of auto, ask, deny", r.Approve)
		}
	}
	return errs
}

// validateSessionTools checks the server names a session block lists
// (path is "session" or "channels.<c>.session").
func (c *Config) validateSessionTools(path string, s Session) Errors {
	if s.Tools == nil {
		return nil
	}
	var errs Errors
	names := c.ToolServerNames()
	seen := map[string]bool{}
	for i, name := range *s.Tools {
		p := fmt.Sprintf("%s.tools[%d]", path, i)
		switch {
		case !slices.Contains(names, name):
			msg := fmt.Sprintf("%q is not a server of agent.tools.servers", name)
			if len(names) == 0 {
				msg += " (none is configured)"
			} else if sg := suggest(name, names); sg != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", sg)
			} else {
				msg += " (configured: " + strings.Join(names, ", ") + ")"
			}
			errs = append(errs, c.errAt(p, "%s", msg))
		case seen[name]:
			errs = append(errs, c.errAt(p, "%q is listed twice", name))
		}
		seen[name] = true
	}
	return errs
}

// toolWarnings: a users allowlist on a WebSocket channel whose clients name
// themselves keeps nobody out.
func (c *Config) toolWarnings() {
	ws := c.Channels.WebSocket
	if !c.WebSocketEnabled() || len(ws.AuthTokens) > 0 || ws.AllowAnonymous {
		return
	}
	offered := c.Policy(ChannelWebSocket).ToolServers.V
	for i, s := range c.Agent.Tools.Servers {
		if len(s.Users) > 0 && slices.Contains(offered, s.Name) {
			c.warn(fmt.Sprintf("agent.tools.servers[%d].users", i), "keeps nobody out on the websocket channel: it has no auth_tokens, so clients name themselves (hello.user) and may claim a listed user")
		}
	}
}

func validApprove(a string) bool {
	return a == ApproveAuto || a == ApproveAsk || a == ApproveDeny
}

// RedactURL is u without what may be a secret: no user or password, and
// a query shown as "?…".
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(not a URL)"
	}
	u.User = nil
	q := u.RawQuery != "" || u.ForceQuery
	u.RawQuery, u.ForceQuery, u.Fragment = "", false, ""
	s := u.String()
	if q {
		s += "?…"
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// describeTools prints agent.tools: the turn's limits and each server's
// transport and rules, with where each value came from. Header and env
// values, args and a URL's user and query are never printed: they may be
// secrets.
func (c *Config) describeTools(tw io.Writer) {
	t := c.Agent.Tools
	if len(t.Servers) == 0 {
		return
	}
	fmt.Fprintf(tw, "tools\n")
	fmt.Fprintf(tw, "  max_rounds\t%d\t%s\n", c.Agent.MaxRounds(), c.from("agent.tools.max_rounds"))
	fmt.Fprintf(tw, "  approve_timeout\t%s\t%s\n", c.Agent.ApproveTimeout(), c.from("agent.tools.approve_timeout"))
	for i, s := range t.Servers {
		p := fmt.Sprintf("agent.tools.servers[%d]", i)
		fmt.Fprintf(tw, "  server %s\n", s.Name)
		if s.Command != "" {
			fmt.Fprintf(tw, "    stdio\t%s\t%s\n", commandText(s), c.from(p+".command"))
		} else {
			fmt.Fprintf(tw, "    url\t%s\t%s\n", urlText(s), c.from(p+".url"))
		}
		fmt.Fprintf(tw, "    timeout\t%s\t%s\n", s.Timeout.D(), c.from(p+".timeout"))
		fmt.Fprintf(tw, "    max_result_bytes\t%s\t%s\n", sizeText(int64(s.MaxResultBytes)), c.from(p+".max_result_bytes"))
		tools := "all it lists"
		if len(s.Tools) > 0 {
			tools = strings.Join(s.Tools, ", ")
		}
		fmt.Fprintf(tw, "    tools\t%s\t%s\n", tools, c.from(p+".tools"))
		fmt.Fprintf(tw, "    approve\t%s\t%s\n", s.Approve, c.from(p+".approve"))
		for _, tool := range sortedKeys(s.ToolRules) {
			if a := s.ToolRules[tool].Approve; a != "" {
				fmt.Fprintf(tw, "    approve %s\t%s\t%s\n", tool, a, c.from(p+".tool_rules."+tool+".approve"))
			}
		}
		fmt.Fprintf(tw, "    idempotent\t%t\t%s\n", s.Idempotent, c.from(p+".idempotent"))
		for _, tool := range sortedKeys(s.ToolRules) {
			if id := s.ToolRules[tool].Idempotent; id != nil {
				fmt.Fprintf(tw, "    idempotent %s\t%t\t%s\n", tool, *id, c.from(p+".tool_rules."+tool+".idempotent"))
			}
		}
		users := "everyone"
		if len(s.Users) > 0 {
			users = strings.Join(s.Users, ", ")
		}
		fmt.Fprintf(tw, "    users\t%s\t%s\n", users, c.from(p+".users"))
	}
}

// commandText is how a stdio server is started, without its args' and
// env's values.
func commandText(s ToolServer) string {
	var extra []string
	switch len(s.Args) {
	case 0:
	case 1:
		extra = append(extra, "1 arg")
	default:
		extra = append(extra, fmt.Sprintf("%d args", len(s.Args)))
	}
	if len(s.Env) > 0 {
		extra = append(extra, "env "+strings.Join(sortedKeys(s.Env), ", "))
	}
	if len(extra) == 0 {
		return s.Command
	}
	return s.Command + " (" + strings.Join(extra, "; ") + ")"
}

// urlText is a streamable HTTP server's URL without credentials, and the
// names of the headers sent to it.
func urlText(s ToolServer) string {
	out := RedactURL(s.URL)
	if len(s.Headers) > 0 {
		out += " (headers " + strings.Join(sortedKeys(s.Headers), ", ") + ")"
	}
	return out
}

// serverList is a list of server names as `gateway check` prints it.
func serverList(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
