// Package config loads bot.yaml: environment expansion, strict decoding,
// defaults, validation, and the effective per-channel policies with the place
// each value came from.
//
// Only cmd/gateway reads this package; it hands plain values to the rest.
package config

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	_ "time/tzdata" // reset timezones must resolve on hosts without zoneinfo
)

// Config is a whole bot.yaml.
type Config struct {
	Gateway  Gateway  `yaml:"gateway"`
	Storage  Storage  `yaml:"storage"`
	Agent    Agent    `yaml:"agent"`
	Session  Session  `yaml:"session"`
	Locks    Locks    `yaml:"locks"`
	Channels Channels `yaml:"channels"`
	Shutdown Shutdown `yaml:"shutdown"`
	Recovery Recovery `yaml:"recovery"`
	Log      Log      `yaml:"log"`
	Metrics  Metrics  `yaml:"metrics"`
	Admin    Admin    `yaml:"admin"`
	// Schedules are the turns the bot takes on time, written by the
	// operator.
	Schedules []Schedule `yaml:"schedules"`

	// File is where the configuration came from, for messages.
	File string `yaml:"-"`
	// Warnings are problems that do not stop the gateway, as "file:line: text".
	Warnings []string `yaml:"-"`

	lines  map[string]int  // key path → line of its value
	broken map[string]bool // key paths whose value could not be read
}

// Gateway is the HTTP listener shared by the WebSocket channel, the web page,
// health, metrics and the Telegram webhook.
type Gateway struct {
	Listen string `yaml:"listen"`
	// PidFile is where serve writes its process id, for `gateway reload`
	// (default: gateway.pid next to the SQLite database; with PostgreSQL,
	// next to bot.yaml).
	PidFile string `yaml:"pid_file"`
}

// Storage selects the database.
type Storage struct {
	Driver        string `yaml:"driver"`
	DSN           string `yaml:"dsn"`
	RetentionDays int    `yaml:"retention_days"`
	// Timeout (PostgreSQL) bounds each request to the database: one not
	// answered within it fails, its connection closed, and is retried as
	// after any storage error.
	Timeout Duration `yaml:"timeout"`
}

// Agent selects the backend that writes replies.
type Agent struct {
	Backend      string `yaml:"backend"`
	Name         string `yaml:"name"`
	Instructions string `yaml:"instructions"`
	OpenAI       OpenAI `yaml:"openai"`
	Tools        Tools  `yaml:"tools"`
	// Models are the models a chat may choose (/model, the WebSocket
	// model frame); none: every chat uses agent.openai.model.
	Models []Model `yaml:"models"`
}

// Tools are the MCP servers whose tools the model may call, and the
// limits of a turn that calls them.
type Tools struct {
	// MaxRounds is how many rounds of tool calls one turn makes at most;
	// then the model must answer without tools (default
	// DefaultMaxToolRounds, 1–MaxMaxToolRounds).
	MaxRounds *int `yaml:"max_rounds"`
	// ApproveTimeout: a call waiting on the user's approval this long is
	// denied (default DefaultApproveTimeout).
	ApproveTimeout *Duration `yaml:"approve_timeout"`
	// Media bounds the pictures, audio and files a call's result keeps
	// for the user.
	Media   ToolMedia    `yaml:"media"`
	Servers []ToolServer `yaml:"servers"`
}

// ToolMedia bounds what the gateway keeps of a tool's media: an item
// over MaxBytes, or past MaxItems of one call, is dropped and the model
// told so.
type ToolMedia struct {
	// MaxBytes bounds one item (default DefaultToolMediaBytes).
	MaxBytes ByteSize `yaml:"max_bytes"`
	// MaxItems bounds the items one call keeps (default DefaultToolMediaItems).
	MaxItems int `yaml:"max_items"`
}

// ToolServer is one MCP server: started over stdio (Command) or reached
// over streamable HTTP (URL), exactly one of the two.
type ToolServer struct {
	// Name prefixes its tools' names as the model sees them (name__tool).
	Name    string            `yaml:"name"`
	Command string            `yaml:"command"`
	Args    []string          `yaml:"args"`
	Env     map[string]string `yaml:"env"`
	URL     string            `yaml:"url"`
	Headers map[string]string `yaml:"headers"`
	// Timeout bounds each call (default DefaultToolTimeout).
	Timeout Duration `yaml:"timeout"`
	// MaxResultBytes: a longer result is cut, and the model told so
	// (default DefaultToolResultBytes).
	MaxResultBytes ByteSize `yaml:"max_result_bytes"`
	// Tools is an allowlist of the server's tools; empty: all it lists.
	Tools []string `yaml:"tools"`
	// Approve is auto, ask (the default) or deny.
	Approve string `yaml:"approve"`
	// Idempotent: a call started and never answered may run again.
	Idempotent bool `yaml:"idempotent"`
	// Users, when set, are the only users offered this server: Telegram
	// user ids and WebSocket principals, bare or as "telegram:<id>" and
	// "websocket:<principal>".
	Users []string `yaml:"users"`
	// ToolRules override Approve and Idempotent for single tools.
	ToolRules map[string]ToolRule `yaml:"tool_rules"`
}

// ToolRule overrides a server's rules for one of its tools; an unset field
// keeps the server's.
type ToolRule struct {
	Approve    string `yaml:"approve"`
	Idempotent *bool  `yaml:"idempotent"`
}

// MaxRounds is agent.tools.max_rounds in effect: the most rounds of tool
// calls in one turn.
func (a Agent) MaxRounds() int {
	if a.Tools.MaxRounds == nil {
		return DefaultMaxToolRounds
	}
	return *a.Tools.MaxRounds
}

// ApproveTimeout is agent.tools.approve_timeout in effect: how long a call
// waits on its user's approval before it counts as denied.
func (a Agent) ApproveTimeout() time.Duration {
	if a.Tools.ApproveTimeout == nil {
		return DefaultApproveTimeout
	}
	return a.Tools.ApproveTimeout.D()
}

// ToolServer returns the configured server called name.
func (a Agent) ToolServer(name string) (ToolServer, bool) {
	for _, s := range a.Tools.Servers {
		if s.Name == name {
			return s, true
		}
	}
	return ToolServer{}, false
}

// Offers reports whether the server is offered to a user of a channel:
// it is when it has no users allowlist, or the list names the user, bare
// or as "<channel>:<user>".
func (s ToolServer) Offers(channel, userID string) bool {
	if len(s.Users) == 0 {
		return true
	}
	for _, u := range s.Users {
		if u == userID || u == channel+":"+userID {
			return true
		}
	}
	return false
}

// OpenAI configures the backend for any OpenAI-compatible chat-completions
// server.
type OpenAI struct {
	BaseURL              string   `yaml:"base_url"`
	APIKey               string   `yaml:"api_key"`
	Model                string   `yaml:"model"`
	Timeout              Duration `yaml:"timeout"`
	MaxRetries           *int     `yaml:"max_retries"`
	Stream               *bool    `yaml:"stream"`
	PricePer1KPrompt     float64  `yaml:"price_per_1k_prompt"`
	PricePer1KCompletion float64  `yaml:"price_per_1k_completion"`
	// ContextTokens is the context window of Model, for /status (0:
	// unknown).
	ContextTokens int `yaml:"context_tokens"`
	// Vision: the model reads images; users' pictures are sent to it.
	Vision bool `yaml:"vision"`
	// TranscriptionModel turns voice on: Telegram voice notes and audio
	// files, and WebSocket audio attachments, are transcribed with this
	// model of the server's /audio/transcriptions endpoint and answered
	// from their transcript. Empty (the default): audio is not read.
	TranscriptionModel string `yaml:"transcription_model"`
	// MaxAudioBytes bounds one piece of audio sent for transcription, on
	// every channel (default DefaultMaxAudioBytes).
	MaxAudioBytes ByteSize `yaml:"max_audio_bytes"`
}

// Session is a conversation policy: at the top level it applies to every
// channel, under channels.<name>.session it overrides the top level.
type Session struct {
	MaxHistory *int `yaml:"max_history"`
	// MaxHistoryTokens bounds the history a turn sends by estimated
	// tokens too (0 or unset: by max_history alone).
	MaxHistoryTokens *int       `yaml:"max_history_tokens"`
	Reset            Reset      `yaml:"reset"`
	Compaction       Compaction `yaml:"compaction"`
	// Busy modes: what a message does while its session has a turn
	// running or waiting. Each key on its own overrides the level above.
	BusyMode      *string `yaml:"busy_mode"`
	DebounceMS    *int    `yaml:"debounce_ms"`
	DebounceMaxMS *int    `yaml:"debounce_max_ms"`
	MaxBatch      *int    `yaml:"max_batch"`
	// CacheBytes bounds the memory of the hot conversation cache (top
	// level only).
	CacheBytes ByteSize `yaml:"cache_bytes"`
	// DelayNotice: a user whose message has waited on the database this
	// long is told, once, that it is kept and will be answered (top level
	// only; default DefaultDelayNotice, 0 turns it off).
	DelayNotice *Duration `yaml:"delay_notice"`
	// Tools names the agent.tools.servers a channel's turns are offered
	// (unset: every configured server; an empty list: none).
	Tools *[]string `yaml:"tools"`
	// Limits are the users' budgets.
	Limits Limits `yaml:"limits"`
	// Schedules are what users may schedule themselves: reminders and
	// check-ins they make in the chat.
	Schedules SessionSchedules `yaml:"schedules"`
	// Memory is what the bot keeps about a user across conversations.
	Memory SessionMemory `yaml:"memory"`
}

// Compaction summarises what falls out of the history window. Enabled,
// keep_last and prompt follow the max_history ladder; model is a setting
// of the top-level session only.
type Compaction struct {
	Enabled  *bool   `yaml:"enabled"`
	KeepLast *int    `yaml:"keep_last"`
	Prompt   *string `yaml:"prompt"`
	// Model writes the summaries (default: agent.openai.model).
	Model string `yaml:"model"`
}

// Reset is a reset policy; every field is optional so that a channel can
// override the top-level policy field by field.
type Reset struct {
	Mode        *string `yaml:"mode"`
	IdleMinutes *int    `yaml:"idle_minutes"`
	AtHour      *int    `yaml:"at_hour"`
	Timezone    *string `yaml:"timezone"`
}

// Locks sizes the per-user lock cache.
type Locks struct {
	MaxEntries int      `yaml:"max_entries"`
	TTL        Duration `yaml:"ttl"`
}

// Channels holds each channel's settings.
type Channels struct {
	WebSocket WebSocket `yaml:"websocket"`
	Telegram  Telegram  `yaml:"telegram"`
}

// WebSocket configures GET /ws and the web chat page.
type WebSocket struct {
	Enabled        *bool             `yaml:"enabled"`
	WebPage        *bool             `yaml:"web_page"`
	AuthTokens     map[string]string `yaml:"auth_tokens"`
	AllowedOrigins []string          `yaml:"allowed_origins"`
	MaxFrameBytes  int               `yaml:"max_frame_bytes"`
	RateLimit      RateLimit         `yaml:"rate_limit"`
	MaxHistory     *int              `yaml:"max_history"`
	Session        Session           `yaml:"session"`
	// AllowAnonymous lets a gateway without auth_tokens listen beyond
	// loopback: clients then get generated guest principals only.
	AllowAnonymous bool `yaml:"allow_anonymous"`
	// ResumeTTL is how long a resume token stays valid after it was issued.
	ResumeTTL Duration `yaml:"resume_ttl"`
}

// RateLimit is a token bucket per principal (WebSocket, shared by all its
// connections) or per user (Telegram), plus an optional ceiling for the
// whole channel.
type RateLimit struct {
	PerSecond float64 `yaml:"per_second"`
	Burst     int     `yaml:"burst"`
	// GlobalPerSecond and GlobalBurst bound the channel as a whole; 0
	// leaves it unbounded.
	GlobalPerSecond float64 `yaml:"global_per_second"`
	GlobalBurst     int     `yaml:"global_burst"`
}

// Metrics protects GET /metrics.
type Metrics struct {
	// Token, when set, is the bearer token a scrape must carry.
	Token string `yaml:"token"`
	// Listen, when set, serves /metrics only on this separate address
	// (and not on gateway.listen).
	Listen string `yaml:"listen"`
}

// Telegram configures the Telegram bot.
type Telegram struct {
	Token        string   `yaml:"token"`
	APIURL       string   `yaml:"api_url"`
	Mode         string   `yaml:"mode"`
	PollTimeout  Duration `yaml:"poll_timeout"`
	Webhook      Webhook  `yaml:"webhook"`
	AllowedUsers []int64  `yaml:"allowed_users"`
	GroupPolicy  string   `yaml:"group_policy"`
	GroupScope   string   `yaml:"group_scope"`
	Streaming    string   `yaml:"streaming"` // auto | draft | edits | off
	// Edits is what an edited message does: answer (an edit before the
	// turn replaces the text, after it is a new message) or ignore.
	Edits      string  `yaml:"edits"`
	MaxHistory *int    `yaml:"max_history"`
	Session    Session `yaml:"session"`
	// Format is how replies are sent: html (Markdown converted to
	// Telegram's HTML) or plain (as written).
	Format string `yaml:"format"`
	// MaxImageBytes: the largest picture fetched for the model.
	MaxImageBytes int `yaml:"max_image_bytes"`
	// AlbumWaitMS is how long after an album's latest part the bot waits
	// for another before it stores the album as one message.
	AlbumWaitMS int `yaml:"album_wait_ms"`
	// NotifyResets tells private chats at once when a sweep archived
	// their conversation (default false; groups are never told).
	NotifyResets bool `yaml:"notify_resets"`
	// RateLimit bounds the messages run per Telegram user, and for the
	// whole bot.
	RateLimit RateLimit `yaml:"rate_limit"`
}

// Webhook configures Telegram's webhook mode.
type Webhook struct {
	URL    string `yaml:"url"`
	Path   string `yaml:"path"`
	Secret string `yaml:"secret"`
}

// Shutdown configures the drain on SIGTERM.
type Shutdown struct {
	DrainTimeout Duration `yaml:"drain_timeout"`
}

// Recovery configures what happens on start to turns a stop interrupted.
type Recovery struct {
	RerunInterrupted *bool    `yaml:"rerun_interrupted"`
	MaxAge           Duration `yaml:"max_age"`
	Concurrency      int      `yaml:"concurrency"`
}

// Admin configures the admin API and page under /admin/.
type Admin struct {
	// Tokens maps an operator's name to their bearer token; the name is
	// logged with every admin action. No tokens: /admin/ is not served.
	Tokens map[string]string `yaml:"tokens"`
}

// AdminEnabled reports whether the admin API and page are served.
func (c *Config) AdminEnabled() bool { return len(c.Admin.Tokens) > 0 }

// Log configures log/slog output.
type Log struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}

// Duration is a time.Duration written as a Go duration string ("10s", "1h").
// A bare number is refused: "10" would silently mean ten nanoseconds.
type Duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: want a duration such as \"10s\"", n.Line)}}
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		// A *yaml.TypeError, unlike any other error, lets yaml.v3 go on
		// decoding the rest of the document.
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %q is not a duration (write it as \"10s\", \"5m\" or \"1h\")", n.Line, n.Value)}}
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// ByteSize is a size in bytes, written as a number of bytes or with a
// binary unit ("64MiB", "512KiB", "1GiB").
type ByteSize int64

// UnmarshalYAML implements yaml.Unmarshaler.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a size such as \"64MiB\"", n.Line)
	}
	v, err := parseByteSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a size (write it as bytes, or with KiB, MiB or GiB: \"64MiB\")", n.Line, n.Value)
	}
	*b = ByteSize(v)
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (b ByteSize) MarshalYAML() (any, error) { return int64(b), nil }

func parseByteSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, err
	}
	if n > (1<<62)/mult || n < -(1<<62)/mult {
		return 0, fmt.Errorf("too large")
	}
	return n * mult, nil
}

// DelayNotice is session.delay_notice: how long a message waits on the
// database before its user is told, once, that it is kept (0: never).
func (c *Config) DelayNotice() time.Duration {
	if c.Session.DelayNotice == nil {
		return DefaultDelayNotice
	}
	return c.Session.DelayNotice.D()
}

// WebSocketEnabled reports whether GET /ws is served.
func (c *Config) WebSocketEnabled() bool { return boolOr(c.Channels.WebSocket.Enabled, true) }

// WebPageEnabled reports whether the web chat page is served at /.
func (c *Config) WebPageEnabled() bool {
	return c.WebSocketEnabled() && boolOr(c.Channels.WebSocket.WebPage, true)
}

// TelegramEnabled reports whether the Telegram channel runs: it does when a
// token is set.
func (c *Config) TelegramEnabled() bool { return c.Channels.Telegram.Token != "" }

// AnonymousWebSocket reports whether WebSocket clients without auth tokens
// get generated guest principals only (hello.user ignored).
func (c *Config) AnonymousWebSocket() bool {
	return len(c.Channels.WebSocket.AuthTokens) == 0 && c.Channels.WebSocket.AllowAnonymous
}

// IsLoopback reports whether a listen address only accepts connections
// from this host: 127.0.0.0/8, ::1 or localhost. An empty host (":8765")
// and 0.0.0.0 listen on every interface.
func IsLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// RerunInterrupted reports whether interrupted turns are run again on start.
func (c *Config) RerunInterrupted() bool { return boolOr(c.Recovery.RerunInterrupted, true) }

// OpenAIMaxRetries is the retry count for the OpenAI backend.
func (c *Config) OpenAIMaxRetries() int {
	if c.Agent.OpenAI.MaxRetries == nil {
		return 2
	}
	return *c.Agent.OpenAI.MaxRetries
}

// Transcribes reports whether voice notes and audio are transcribed:
// backend openai with a transcription_model.
func (c *Config) Transcribes() bool {
	return c.Agent.Backend == "openai" && c.Agent.OpenAI.TranscriptionModel != ""
}

// OpenAIStream reports whether the OpenAI backend streams replies.
func (c *Config) OpenAIStream() bool { return boolOr(c.Agent.OpenAI.Stream, true) }

func boolOr(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}

// Warn adds a warning at the line of key path (Warnings): a problem found
// beyond the file itself, such as a tool server gateway check could not
// start.
func (c *Config) Warn(path, format string, args ...any) { c.warn(path, format, args...) }

// where returns "file:line" for a key path, or the file alone.
func (c *Config) where(path string) string {
	if l := c.lines[path]; l > 0 {
		return fmt.Sprintf("%s:%d", c.File, l)
	}
	return c.File
}

func (c *Config) errAt(path, format string, args ...any) *Error {
	return &Error{File: c.File, Line: c.lines[path], Key: path, Msg: fmt.Sprintf(format, args...)}
}
