package config

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Defaults. bot.yaml.example documents each of them.
const (
	DefaultListen              = "127.0.0.1:8765"
	DefaultSQLiteDSN           = "gateway.db"
	DefaultMaxHistory          = 100
	DefaultIdleMinutes         = 60
	DefaultTimezone            = "UTC"
	DefaultMaxFrameBytes       = 64 << 10
	DefaultDrainTimeout        = 10 * time.Second
	DefaultRecoveryAge         = time.Hour
	DefaultRecoveryConcurrency = 16
	DefaultOpenAIBaseURL       = "https://api.openai.com/v1"
	DefaultOpenAITimeout       = 60 * time.Second
	DefaultTelegramAPI         = "https://api.telegram.org"
	DefaultMaxImageBytes       = 5 << 20
	DefaultAlbumWaitMS         = 800      // channels.telegram.album_wait_ms: an album's parts come within ms of each other
	MinAlbumWaitMS             = 100      // below it a slow client's album would come apart
	MaxAlbumWaitMS             = 5000     // longer keeps every album's reply waiting for seconds
	MaxTelegramDownload        = 20 << 20 // the Bot API's limit on files a bot downloads
	DefaultMaxAudioBytes       = 20 << 20 // agent.openai.max_audio_bytes: the Bot API's download limit
	MinMaxAudioBytes           = 1 << 10
	MaxMaxAudioBytes           = 1 << 30
	DefaultWebhookPath         = "/telegram/webhook"
	DefaultPollTimeout         = 30 * time.Second
	DefaultRatePerSecond       = 5
	DefaultRateBurst           = 10
	DefaultLocksTTL            = time.Hour
	DefaultLocksEntries        = 10_000
	DefaultBusyMode            = BusyCollect
	DefaultDebounceMS          = 0    // websocket: a client sends whole messages
	DefaultTelegramDebounceMS  = 1500 // telegram: people send a thought in several messages
	DefaultDebounceMaxMS       = 5000
	DefaultMaxBatch            = 20
	MaxMaxBatch                = 1000
	DefaultResumeTTL           = 30 * 24 * time.Hour
	DefaultCacheBytes          = 64 << 20
	DefaultDelayNotice         = 20 * time.Second
	// DefaultStorageTimeout is storage.timeout: how long one request to
	// PostgreSQL may go unanswered.
	DefaultStorageTimeout     = 10 * time.Second
	MinStorageTimeout         = 100 * time.Millisecond
	DefaultTelegramRatePerSec = 1
	DefaultTelegramRateBurst  = 10
	MinCacheBytes             = 64 << 10

	// supervisorStopTimeout is the stop timeout of common supervisors
	// (systemd's DefaultTimeoutStopSec, Kubernetes' grace period).
	supervisorStopTimeout = 30 * time.Second
)

// Reset modes.
const (
	ResetNone  = "none"
	ResetIdle  = "idle"
	ResetDaily = "daily"
	ResetBoth  = "both"
)

// Busy modes.
const (
	BusyQueue     = "queue"
	BusyCollect   = "collect"
	BusyInterrupt = "interrupt"
)

func (c *Config) applyDefaults() {
	setStr := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	setDur := func(p *Duration, v time.Duration) {
		if *p == 0 {
			*p = Duration(v)
		}
	}
	setInt := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	setStr(&c.Gateway.Listen, DefaultListen)
	setStr(&c.Storage.Driver, "sqlite")
	if c.Storage.Driver == "sqlite" {
		setStr(&c.Storage.DSN, DefaultSQLiteDSN)
	}
	setDur(&c.Storage.Timeout, DefaultStorageTimeout)
	if c.Gateway.PidFile == "" {
		c.Gateway.PidFile = c.defaultPidFile()
	}
	setStr(&c.Agent.Backend, "echo")
	setStr(&c.Agent.Name, c.Agent.Backend)
	setStr(&c.Agent.OpenAI.BaseURL, DefaultOpenAIBaseURL)
	setDur(&c.Agent.OpenAI.Timeout, DefaultOpenAITimeout)
	if c.Agent.OpenAI.MaxAudioBytes == 0 {
		c.Agent.OpenAI.MaxAudioBytes = DefaultMaxAudioBytes
	}
	setInt(&c.Locks.MaxEntries, DefaultLocksEntries)
	setDur(&c.Locks.TTL, DefaultLocksTTL)
	ws := &c.Channels.WebSocket
	setInt(&ws.MaxFrameBytes, DefaultMaxFrameBytes)
	if ws.RateLimit.PerSecond == 0 {
		ws.RateLimit.PerSecond = DefaultRatePerSecond
	}
	setInt(&ws.RateLimit.Burst, DefaultRateBurst)
	setDur(&ws.ResumeTTL, DefaultResumeTTL)
	if c.Session.CacheBytes == 0 {
		c.Session.CacheBytes = DefaultCacheBytes
	}
	tg := &c.Channels.Telegram
	setStr(&tg.APIURL, DefaultTelegramAPI)
	setStr(&tg.Mode, "polling")
	setDur(&tg.PollTimeout, DefaultPollTimeout)
	setStr(&tg.Webhook.Path, DefaultWebhookPath)
	setStr(&tg.GroupPolicy, "mention")
	setStr(&tg.GroupScope, "user")
	setStr(&tg.Format, "html")
	setInt(&tg.MaxImageBytes, DefaultMaxImageBytes)
	setInt(&tg.AlbumWaitMS, DefaultAlbumWaitMS)
	setStr(&tg.Streaming, "auto")
	setStr(&tg.Edits, "answer")
	if tg.RateLimit.PerSecond == 0 {
		tg.RateLimit.PerSecond = DefaultTelegramRatePerSec
	}
	setInt(&tg.RateLimit.Burst, DefaultTelegramRateBurst)
	setDur(&c.Shutdown.DrainTimeout, DefaultDrainTimeout)
	setDur(&c.Recovery.MaxAge, DefaultRecoveryAge)
	setInt(&c.Recovery.Concurrency, DefaultRecoveryConcurrency)
	setStr(&c.Log.Level, "info")
	setStr(&c.Log.Format, "text")
	c.applyToolDefaults()
	c.applyScheduleDefaults()
}

var webhookSecretRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,256}$`)

// Validate returns every problem in the configuration, not just the first.
// It also fills c.Warnings.
func (c *Config) Validate() Errors {
	var errs Errors
	bad := func(path, format string, args ...any) { errs = append(errs, c.errAt(path, format, args...)) }
	oneOf := func(path, v string, allowed ...string) {
		for _, a := range allowed {
			if v == a {
				return
			}
		}
		bad(path, "%q is not one of %v", v, allowed)
	}
	c.Warnings = nil

	if _, _, err := net.SplitHostPort(c.Gateway.Listen); err != nil {
		bad("gateway.listen", "%q is not host:port", c.Gateway.Listen)
	}

	oneOf("storage.driver", c.Storage.Driver, "sqlite", "postgres")
	if c.Storage.Driver == "postgres" && c.Storage.DSN == "" {
		bad("storage.dsn", "required with driver postgres (for example postgres://user@127.0.0.1:5432/chatgate)")
	}
	if c.Storage.RetentionDays < 0 {
		bad("storage.retention_days", "must be 0 (keep forever) or more, got %d", c.Storage.RetentionDays)
	}
	if c.Storage.Timeout.D() < MinStorageTimeout {
		bad("storage.timeout", "must be at least %s (a healthy commit under load can take that long), got %s", MinStorageTimeout, c.Storage.Timeout.D())
	}

	oneOf("agent.backend", c.Agent.Backend, "echo", "openai")
	if c.Agent.Backend == "openai" {
		o := c.Agent.OpenAI
		if o.Model == "" {
			bad("agent.openai.model", "required with backend openai")
		}
		if u, err := url.Parse(o.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("agent.openai.base_url", "%q is not an http(s) URL", o.BaseURL)
		}
		if o.Timeout < 0 {
			bad("agent.openai.timeout", "must not be negative")
		}
		if o.MaxRetries != nil && *o.MaxRetries < 0 {
			bad("agent.openai.max_retries", "must not be negative")
		}
		if o.PricePer1KPrompt < 0 || o.PricePer1KCompletion < 0 {
			bad("agent.openai", "prices must not be negative")
		}
	}
	errs = append(errs, c.validateAudio()...)
	errs = append(errs, c.validateTools()...)
	errs = append(errs, c.validateModels()...)
	errs = append(errs, c.validateSchedules()...)

	errs = append(errs, c.validateSession("session", c.Session)...)
	if c.Locks.MaxEntries < 0 {
		bad("locks.max_entries", "must not be negative")
	}
	if c.Locks.TTL < 0 {
		bad("locks.ttl", "must not be negative")
	}

	ws := c.Channels.WebSocket
	errs = append(errs, c.validateSession("channels.websocket.session", ws.Session)...)
	if ws.MaxHistory != nil && *ws.MaxHistory < 0 {
		bad("channels.websocket.max_history", "must be 0 or more, got %d", *ws.MaxHistory)
	}
	if ws.MaxFrameBytes < 256 {
		bad("channels.websocket.max_frame_bytes", "must be at least 256, got %d", ws.MaxFrameBytes)
	}
	errs = append(errs, c.validateRate("channels.websocket.rate_limit", ws.RateLimit)...)
	if ws.ResumeTTL < 0 {
		bad("channels.websocket.resume_ttl", "must not be negative")
	}
	if c.WebSocketEnabled() && len(ws.AuthTokens) == 0 && !ws.AllowAnonymous && !IsLoopback(c.Gateway.Listen) {
		bad("gateway.listen", "%q accepts connections from other hosts, and channels.websocket has no auth_tokens: anyone could chat as any user. "+
			"Set channels.websocket.auth_tokens, listen on 127.0.0.1, or set channels.websocket.allow_anonymous: true to serve generated guest users only", c.Gateway.Listen)
	}
	if ws.AllowAnonymous && len(ws.AuthTokens) > 0 {
		c.warn("channels.websocket.allow_anonymous", "has no effect: auth_tokens are set, and every client needs one")
	}
	seen := map[string]string{}
	for name, tok := range ws.AuthTokens {
		p := "channels.websocket.auth_tokens." + name
		switch {
		case tok == "":
			bad(p, "token is empty")
		case len(tok) < 16:
			bad(p, "token is shorter than 16 characters")
		case seen[tok] != "":
			bad(p, "same token as %s", seen[tok])
		}
		seen[tok] = name
	}
	for i, o := range ws.AllowedOrigins {
		if u, err := url.Parse(o); o != "*" && (err != nil || u.Scheme == "" || u.Host == "") {
			bad(fmt.Sprintf("channels.websocket.allowed_origins[%d]", i), "%q is not an origin such as https://chat.example.com", o)
		}
	}

	adminSeen := map[string]string{}
	for name, tok := range c.Admin.Tokens {
		p := "admin.tokens." + name
		switch {
		case strings.TrimSpace(tok) == "":
			bad(p, "token is empty")
		case len(tok) < 16:
			bad(p, "token is shorter than 16 characters")
		case adminSeen[tok] != "":
			bad(p, "same token as %s", adminSeen[tok])
		case slices.Contains(slices.Collect(maps.Values(ws.AuthTokens)), tok):
			bad(p, "same token as a channels.websocket.auth_tokens entry: an admin token must be its own secret")
		}
		adminSeen[tok] = name
	}

	tg := c.Channels.Telegram
	errs = append(errs, c.validateSession("channels.telegram.session", tg.Session)...)
	if tg.MaxHistory != nil && *tg.MaxHistory < 0 {
		bad("channels.telegram.max_history", "must be 0 or more, got %d", *tg.MaxHistory)
	}
	oneOf("channels.telegram.mode", tg.Mode, "polling", "webhook")
	errs = append(errs, c.validateRate("channels.telegram.rate_limit", tg.RateLimit)...)
	oneOf("channels.telegram.group_policy", tg.GroupPolicy, "mention", "all")
	oneOf("channels.telegram.group_scope", tg.GroupScope, "user", "chat")
	oneOf("channels.telegram.format", tg.Format, "html", "plain")
	oneOf("channels.telegram.streaming", tg.Streaming, "auto", "draft", "edits", "off")
	oneOf("channels.telegram.edits", tg.Edits, "answer", "ignore")
	if u, err := url.Parse(tg.APIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("channels.telegram.api_url", "%q is not an http(s) URL", tg.APIURL)
	}
	if tg.PollTimeout < 0 {
		bad("channels.telegram.poll_timeout", "must not be negative")
	}
	if tg.MaxImageBytes < 1024 || tg.MaxImageBytes > MaxTelegramDownload {
		bad("channels.telegram.max_image_bytes", "must be between 1024 and %d (the Bot API's download limit), got %d", MaxTelegramDownload, tg.MaxImageBytes)
	}
	if tg.AlbumWaitMS < MinAlbumWaitMS || tg.AlbumWaitMS > MaxAlbumWaitMS {
		bad("channels.telegram.album_wait_ms", "must be between %d and %d, got %d", MinAlbumWaitMS, MaxAlbumWaitMS, tg.AlbumWaitMS)
	}
	if c.TelegramEnabled() && tg.Mode == "webhook" {
		if u, err := url.Parse(tg.Webhook.URL); err != nil || u.Scheme != "https" || u.Host == "" {
			bad("channels.telegram.webhook.url", "webhook mode needs the public https URL Telegram posts to, got %q", tg.Webhook.URL)
		}
		if !webhookSecretRE.MatchString(tg.Webhook.Secret) {
			bad("channels.telegram.webhook.secret", "webhook mode needs a secret of 1–256 characters A–Z, a–z, 0–9, _ and -")
		}
	}
	if tg.Webhook.Path == "" || tg.Webhook.Path[0] != '/' {
		bad("channels.telegram.webhook.path", "must start with /, got %q", tg.Webhook.Path)
	}
	if tg.NotifyResets && !c.Policy(ChannelTelegram).Idle() && !c.Policy(ChannelTelegram).Daily() {
		c.warn("channels.telegram.notify_resets", "has no effect: the telegram channel's reset.mode is none, so no sweep archives its conversations")
	}

	if c.Shutdown.DrainTimeout < 0 {
		bad("shutdown.drain_timeout", "must not be negative")
	} else if c.Shutdown.DrainTimeout.D() > supervisorStopTimeout-5*time.Second {
		c.warn("shutdown.drain_timeout", "%s leaves little time before a supervisor's usual %s stop timeout kills the process; raise the supervisor's timeout (systemd TimeoutStopSec, Kubernetes terminationGracePeriodSeconds) to at least drain_timeout + 10s",
			c.Shutdown.DrainTimeout.D(), supervisorStopTimeout)
	}
	if c.Recovery.MaxAge < 0 {
		bad("recovery.max_age", "must not be negative")
	}
	if c.Recovery.Concurrency < 1 || c.Recovery.Concurrency > 1024 {
		bad("recovery.concurrency", "must be 1–1024, got %d", c.Recovery.Concurrency)
	}
	if c.Session.CacheBytes < MinCacheBytes {
		bad("session.cache_bytes", "must be at least %d (64KiB), got %d", MinCacheBytes, c.Session.CacheBytes)
	}
	if c.Metrics.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Metrics.Listen); err != nil {
			bad("metrics.listen", "%q is not host:port", c.Metrics.Listen)
		} else if c.Metrics.Listen == c.Gateway.Listen {
			bad("metrics.listen", "must differ from gateway.listen (leave it out to serve /metrics there)")
		}
	}
	if c.Metrics.Token != "" && len(c.Metrics.Token) < 16 {
		bad("metrics.token", "token is shorter than 16 characters")
	}
	if c.Metrics.Token == "" {
		switch {
		case c.Metrics.Listen != "" && !IsLoopback(c.Metrics.Listen):
			c.warn("metrics.listen", "%q accepts scrapes from other hosts and metrics.token is not set: anyone who reaches it reads the metrics", c.Metrics.Listen)
		case c.Metrics.Listen == "" && !IsLoopback(c.Gateway.Listen):
			c.warn("gateway.listen", "/metrics is served on %q to anyone who reaches it: set metrics.token, or metrics.listen on an internal address", c.Gateway.Listen)
		}
	}
	oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error")
	oneOf("log.format", c.Log.Format, "text", "json")

	// Effective policies: a channel can combine top-level and channel fields
	// into something invalid (mode daily here, no at_hour anywhere). They
	// are checked even when other keys are wrong, so that one run shows
	// every problem.
	for _, p := range c.Policies() {
		errs = append(errs, p.problems(c)...)
	}
	errs = append(errs, c.dailyProblems()...)
	errs = append(errs, c.debounceProblems()...)
	c.toolWarnings()
	return c.dropBroken(errs)
}

// dropBroken leaves out the problems of keys whose value could not be read:
// their error is already reported, and the zero value they kept in its
// place says nothing about the file.
func (c *Config) dropBroken(errs Errors) Errors {
	if len(c.broken) == 0 {
		return errs
	}
	out := errs[:0]
	for _, e := range errs {
		if !isBroken(c.broken, e.Key) {
			out = append(out, e)
		}
	}
	return out
}

// validateAudio checks the transcription keys, which apply to every
// channel.
func (c *Config) validateAudio() Errors {
	var errs Errors
	o := c.Agent.OpenAI
	if n := int64(o.MaxAudioBytes); n < MinMaxAudioBytes || n > MaxMaxAudioBytes {
		errs = append(errs, c.errAt("agent.openai.max_audio_bytes", "must be between 1KiB and 1GiB (as bytes, or with KiB, MiB or GiB: \"20MiB\"), got %d", n))
	}
	if strings.TrimSpace(o.TranscriptionModel) != o.TranscriptionModel {
		errs = append(errs, c.errAt("agent.openai.transcription_model", "%q has spaces around it", o.TranscriptionModel))
	}
	if o.TranscriptionModel != "" && c.Agent.Backend != "openai" {
		c.warn("agent.openai.transcription_model", "has no effect: agent.backend is %s, and only the openai backend transcribes", c.Agent.Backend)
	}
	tg := c.Channels.Telegram
	if c.Transcribes() && c.TelegramEnabled() && int64(o.MaxAudioBytes) > MaxTelegramDownload && tg.APIURL == DefaultTelegramAPI {
		c.warn("agent.openai.max_audio_bytes", "is over 20MiB, the largest file Telegram's Bot API lets a bot download: larger voice notes and audio fail there (a self-hosted Bot API server, channels.telegram.api_url, serves more)")
	}
	return errs
}

func (c *Config) validateSession(path string, s Session) Errors {
	var errs Errors
	bad := func(key, format string, args ...any) {
		errs = append(errs, c.errAt(path+"."+key, format, args...))
	}
	if s.MaxHistory != nil && *s.MaxHistory < 0 {
		bad("max_history", "must be 0 or more, got %d", *s.MaxHistory)
	}
	errs = append(errs, c.validateLimits(path+".limits", s.Limits)...)
	errs = append(errs, c.validateSessionSchedules(path, s.Schedules)...)
	errs = append(errs, c.validateMemory(path, s.Memory)...)
	if path != "session" && s.CacheBytes != 0 {
		bad("cache_bytes", "is a setting of the top-level session only")
	}
	if path != "session" && s.DelayNotice != nil {
		bad("delay_notice", "is a setting of the top-level session only")
	}
	if s.DelayNotice != nil && *s.DelayNotice < 0 {
		bad("delay_notice", "must not be negative (0 turns the notice off)")
	}
	if s.MaxHistoryTokens != nil && *s.MaxHistoryTokens < 0 {
		bad("max_history_tokens", "must be 0 or more (0: no token budget), got %d", *s.MaxHistoryTokens)
	}
	if k := s.Compaction.KeepLast; k != nil && *k < 1 {
		bad("compaction.keep_last", "must be at least 1, got %d", *k)
	}
	if p := s.Compaction.Prompt; p != nil && strings.TrimSpace(*p) == "" {
		bad("compaction.prompt", "must not be empty (leave it out for the built-in prompt)")
	}
	if path != "session" && s.Compaction.Model != "" {
		bad("compaction.model", "is a setting of the top-level session only")
	}
	r := s.Reset
	if r.Mode != nil {
		switch *r.Mode {
		case ResetNone, ResetIdle, ResetDaily, ResetBoth:
		default:
			bad("reset.mode", "%q is not one of none, idle, daily, both", *r.Mode)
		}
	}
	if r.IdleMinutes != nil && *r.IdleMinutes < 1 {
		bad("reset.idle_minutes", "must be at least 1, got %d", *r.IdleMinutes)
	}
	if r.AtHour != nil && (*r.AtHour < 0 || *r.AtHour > 23) {
		bad("reset.at_hour", "must be an hour from 0 to 23, got %d", *r.AtHour)
	}
	if r.Timezone != nil {
		if _, err := time.LoadLocation(*r.Timezone); err != nil || *r.Timezone == "" {
			bad("reset.timezone", "%q is not an IANA time zone such as Europe/Berlin", *r.Timezone)
		}
	}
	if s.BusyMode != nil {
		switch *s.BusyMode {
		case BusyQueue, BusyCollect, BusyInterrupt:
		default:
			bad("busy_mode", "%q is not one of queue, collect, interrupt", *s.BusyMode)
		}
	}
	if s.DebounceMS != nil && *s.DebounceMS < 0 {
		bad("debounce_ms", "must be 0 or more, got %d", *s.DebounceMS)
	}
	if s.DebounceMaxMS != nil && *s.DebounceMaxMS < 0 {
		bad("debounce_max_ms", "must be 0 or more, got %d", *s.DebounceMaxMS)
	}
	if s.MaxBatch != nil && (*s.MaxBatch < 1 || *s.MaxBatch > MaxMaxBatch) {
		bad("max_batch", "must be 1–%d, got %d", MaxMaxBatch, *s.MaxBatch)
	}
	errs = append(errs, c.validateSessionTools(path, s)...)
	return errs
}

func (c *Config) validateRate(path string, r RateLimit) Errors {
	var errs Errors
	bad := func(key, format string, args ...any) {
		errs = append(errs, c.errAt(path+"."+key, format, args...))
	}
	if r.PerSecond < 0 {
		bad("per_second", "must not be negative")
	}
	if r.Burst < 0 {
		bad("burst", "must not be negative")
	}
	if r.GlobalPerSecond < 0 {
		bad("global_per_second", "must not be negative (0: no ceiling)")
	}
	if r.GlobalBurst < 0 {
		bad("global_burst", "must not be negative")
	}
	if r.GlobalPerSecond > 0 && r.GlobalBurst == 0 {
		bad("global_burst", "required with global_per_second (the most messages the channel takes at once)")
	}
	return errs
}

func (c *Config) warn(path, format string, args ...any) {
	c.Warnings = append(c.Warnings, fmt.Sprintf("%s: %s: %s", c.where(path), path, fmt.Sprintf(format, args...)))
}
