package tools

import "time"

// ServerConfig is one MCP server.
type ServerConfig struct {
	Name           string
	Command        string
	Args           []string
	Env            map[string]string
	URL            string
	Headers        map[string]string
	Timeout        time.Duration // per call; 0: DefaultTimeout
	MaxResultBytes int           // 0: DefaultMaxResultBytes
	Tools          []string      // allowlist; empty: all
	Approve        Approve       // "" : ApproveAsk
	Idempotent     bool
	PerTool        map[string]ToolConfig
}

// ToolConfig overrides a server's rules for one tool.
type ToolConfig struct {
	Approve    Approve // "": the server's
	Idempotent *bool   // nil: the server's
}

const (
	DefaultTimeout        = 30 * time.Second
	DefaultMaxResultBytes = 16 << 10
)
