package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chatgate/chatgate/bots/telegram"
	"github.com/chatgate/chatgate/config"
	"github.com/chatgate/chatgate/gateway"
	"github.com/chatgate/chatgate/sessions"
)

// reloader applies a changed bot.yaml to a running gateway (SIGHUP,
// POST /admin/api/reload). What it can change takes effect for the next
// turn, update and connection through the consumers' atomic swaps; nothing
// is rebuilt, so no connection drops and no Telegram update is lost. Keys
// read only at start are named in a log line and left as they run.
type reloader struct {
	path    string // "" for the embedded defaults
	log     *slog.Logger
	level   *slog.LevelVar
	metrics *gateway.Metrics
	mgr     *sessions.Manager
	ws      *gateway.WebSocket
	bot     *telegram.Bot // nil without Telegram
	// transcriber follows the agent (nil without transcription).
	transcriber *liveTranscriber

	mu      sync.Mutex     // one reload at a time
	started *config.Config // what the process started with: restart-only keys
	applied *config.Config // the last configuration applied
}

func (r *reloader) setBot(b *telegram.Bot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bot = b
}

// reload re-reads the file. A file with problems changes nothing: every
// problem is logged as file:line: message, and the failure counted.
func (r *reloader) reload(by string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cfg, err := loadConfig(r.path)
	if err != nil {
		var errs config.Errors
		problems := []string{strings.TrimSpace(err.Error())}
		if errors.As(err, &errs) {
			problems = problems[:0]
			for _, e := range errs {
				problems = append(problems, e.Error())
			}
		}
		for _, p := range problems {
			r.log.Error("reload: " + p)
		}
		r.log.Error("reload failed: the running configuration is kept", slog.String("by", by), slog.Int("problems", len(problems)))
		r.metrics.ReloadDone(false)
		return fmt.Errorf("%d problem(s) in the configuration; the running configuration is kept:\n%s", len(problems), strings.Join(problems, "\n"))
	}
	for _, w := range cfg.Warnings {
		r.log.Warn(w)
	}
	changed := r.apply(cfg)
	if keys := restartKeys(r.started, cfg); len(keys) > 0 {
		r.log.Warn("reload: these keys need a restart: " + strings.Join(keys, ", "))
	}
	r.applied = cfg
	r.metrics.ReloadDone(true)
	what := "nothing"
	if len(changed) > 0 {
		what = strings.Join(changed, ", ")
	}
	r.log.Info("config reloaded", slog.String("changed", what), slog.String("by", by), slog.String("config", cfg.File))
	return nil
}

// apply hands the new values to the consumers and returns the names of
// the sections that changed.
func (r *reloader) apply(cfg *config.Config) []string {
	old := r.applied
	var changed []string
	// agent includes the instructions.
	agentChanged := !reflect.DeepEqual(old.Agent, cfg.Agent) || old.Session.Compaction.Model != cfg.Session.Compaction.Model
	if policyText(old) != policyText(cfg) || agentChanged {
		s := sessions.Settings{Policies: policies(cfg), Instructions: cfg.Agent.Instructions}
		if policyText(old) != policyText(cfg) {
			changed = append(changed, "policies")
		}
		if agentChanged {
			// The new agent writes the turns that start from now on; a
			// running turn finishes with the one it called.
			s.Agent, s.Compactor = newAgent(cfg), newCompactor(cfg)
			s.Models, s.ContextTokens = models(cfg), cfg.Agent.OpenAI.ContextTokens
			r.transcriber.follow(s.Agent)
			changed = append(changed, "agent")
		}
		if err := r.mgr.Reconfigure(s); err != nil {
			r.log.Error("reload: sweeps", slog.String("error", err.Error()))
		}
	}
	if old.DelayNotice() != cfg.DelayNotice() {
		r.mgr.SetDelayNotice(cfg.DelayNotice())
		changed = append(changed, "session.delay_notice")
	}
	ows, nws := old.Channels.WebSocket, cfg.Channels.WebSocket
	if !reflect.DeepEqual(ows.AuthTokens, nws.AuthTokens) || old.AnonymousWebSocket() != cfg.AnonymousWebSocket() {
		changed = append(changed, "auth_tokens")
	}
	if ows.RateLimit != nws.RateLimit || old.Channels.Telegram.RateLimit != cfg.Channels.Telegram.RateLimit {
		changed = append(changed, "rate_limits")
	}
	r.ws.Reconfigure(gateway.WSSettings{
		AuthTokens: nws.AuthTokens, Anonymous: cfg.AnonymousWebSocket(),
		RatePerSecond: nws.RateLimit.PerSecond, RateBurst: nws.RateLimit.Burst,
		RateGlobalPerSecond: nws.RateLimit.GlobalPerSecond, RateGlobalBurst: nws.RateLimit.GlobalBurst,
		HistoryLimit: max(cfg.Policy(config.ChannelWebSocket).MaxHistory.V, 1),
	})
	otg, ntg := old.Channels.Telegram, cfg.Channels.Telegram
	if !reflect.DeepEqual(otg.AllowedUsers, ntg.AllowedUsers) || otg.GroupPolicy != ntg.GroupPolicy {
		changed = append(changed, "allowlists")
	}
	if r.bot != nil {
		r.bot.Reconfigure(telegram.Settings{
			AllowedUsers: ntg.AllowedUsers, GroupPolicy: ntg.GroupPolicy,
			RatePerSecond: ntg.RateLimit.PerSecond, RateBurst: ntg.RateLimit.Burst,
			RateGlobalPerSecond: ntg.RateLimit.GlobalPerSecond, RateGlobalBurst: ntg.RateLimit.GlobalBurst,
		})
	}
	if old.Log.Level != cfg.Log.Level {
		r.level.Set(logLevel(cfg))
		changed = append(changed, "log.level")
	}
	return changed
}

// policyText is the resolved policies in a comparable form.
func policyText(cfg *config.Config) string {
	var b strings.Builder
	for _, p := range cfg.Policies() {
		fmt.Fprintf(&b, "%s %d %s %d %d %s %s %d %d %d %d %t %d %q\n", p.Channel, p.MaxHistory.V, p.ResetMode.V, p.IdleMinutes.V, p.AtHour.V,
			p.Location(), p.BusyMode.V, p.DebounceMS.V, p.DebounceMaxMS.V, p.MaxBatch.V,
			p.MaxHistoryTokens.V, p.CompactionEnabled.V, p.CompactionKeepLast.V, p.CompactionPrompt.V)
	}
	return b.String()
}

// restartKeys names the keys whose new value differs from the one the
// process started with and which are only read at start.
func restartKeys(old, cfg *config.Config) []string {
	ows, nws := old.Channels.WebSocket, cfg.Channels.WebSocket
	otg, ntg := old.Channels.Telegram, cfg.Channels.Telegram
	checks := []struct {
		key  string
		a, b any
	}{
		{"gateway.listen", old.Gateway.Listen, cfg.Gateway.Listen},
		{"gateway.pid_file", old.Gateway.PidFile, cfg.Gateway.PidFile},
		{"storage.driver", old.Storage.Driver, cfg.Storage.Driver},
		{"storage.dsn", old.Storage.DSN, cfg.Storage.DSN},
		{"storage.retention_days", old.Storage.RetentionDays, cfg.Storage.RetentionDays},
		{"session.cache_bytes", old.Session.CacheBytes, cfg.Session.CacheBytes},
		{"locks", old.Locks, cfg.Locks},
		{"channels.websocket.enabled", old.WebSocketEnabled(), cfg.WebSocketEnabled()},
		{"channels.websocket.web_page", old.WebPageEnabled(), cfg.WebPageEnabled()},
		{"channels.websocket.allowed_origins", ows.AllowedOrigins, nws.AllowedOrigins},
		{"channels.websocket.max_frame_bytes", ows.MaxFrameBytes, nws.MaxFrameBytes},
		{"channels.websocket.resume_ttl", ows.ResumeTTL, nws.ResumeTTL},
		{"channels.telegram.token", otg.Token, ntg.Token},
		{"channels.telegram.api_url", otg.APIURL, ntg.APIURL},
		{"channels.telegram.mode", otg.Mode, ntg.Mode},
		{"channels.telegram.poll_timeout", otg.PollTimeout, ntg.PollTimeout},
		{"channels.telegram.webhook", otg.Webhook, ntg.Webhook},
		{"channels.telegram.group_scope", otg.GroupScope, ntg.GroupScope},
		{"channels.telegram.format", otg.Format, ntg.Format},
		{"channels.telegram.streaming", otg.Streaming, ntg.Streaming},
		{"channels.telegram.edits", otg.Edits, ntg.Edits},
		{"channels.telegram.max_image_bytes", otg.MaxImageBytes, ntg.MaxImageBytes},
		{"channels.telegram.album_wait_ms", otg.AlbumWaitMS, ntg.AlbumWaitMS},
		{"channels.telegram.notify_resets", otg.NotifyResets, ntg.NotifyResets},
		{"agent.openai.vision", old.Agent.OpenAI.Vision, cfg.Agent.OpenAI.Vision},
		{"agent.openai.transcription_model", old.Transcribes(), cfg.Transcribes()},
		{"agent.openai.max_audio_bytes", old.Agent.OpenAI.MaxAudioBytes, cfg.Agent.OpenAI.MaxAudioBytes},
		{"agent.tools", old.Agent.Tools, cfg.Agent.Tools},
		{"shutdown.drain_timeout", old.Shutdown.DrainTimeout, cfg.Shutdown.DrainTimeout},
		{"recovery", old.Recovery, cfg.Recovery},
		{"log.format", old.Log.Format, cfg.Log.Format},
		{"metrics", old.Metrics, cfg.Metrics},
		{"admin.tokens", old.Admin.Tokens, cfg.Admin.Tokens},
	}
	var keys []string
	for _, c := range checks {
		if !reflect.DeepEqual(c.a, c.b) {
			keys = append(keys, c.key)
		}
	}
	return keys
}

// writePidFile writes this process's id for `gateway reload`; the returned
// function removes it if it still names this process.
func writePidFile(path string) (func(), error) {
	pid := strconv.Itoa(os.Getpid())
	if err := os.WriteFile(path, []byte(pid+"\n"), 0o644); err != nil {
		return func() {}, err
	}
	return func() {
		if data, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(data)) == pid {
			os.Remove(path)
		}
	}, nil
}

// reloadCmd is `gateway reload`: it sends SIGHUP to the gateway named by
// the pid file of the configuration. The file is checked first: a broken
// one is reported here and nothing is signalled.
func reloadCmd(args []string, stdout, stderr io.Writer) int {
	fs, path := configFlag("reload", stderr)
	adminURL := fs.String("admin", "", "reload through the admin API at this base `URL` (http://host:port) instead of the pid file")
	token := fs.String("token", "", "the admin `TOKEN` for -admin (default $CHATGATE_ADMIN_TOKEN)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *adminURL != "" {
		return reloadAdmin(*adminURL, *token, stdout, stderr)
	}
	cfg, code := parseConfig(fs, path, nil, stderr)
	if cfg == nil {
		if code == 1 {
			fmt.Fprintln(stderr, "gateway reload: nothing signalled; the running gateway keeps its configuration")
		}
		return code
	}
	pidFile := cfg.Gateway.PidFile
	data, err := os.ReadFile(pidFile)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(stderr, "gateway reload: no gateway is running: %s does not exist (gateway.pid_file)\n", pidFile)
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "gateway reload: %v\n", err)
		return 1
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		fmt.Fprintf(stderr, "gateway reload: %s does not hold a process id\n", pidFile)
		return 1
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			fmt.Fprintf(stderr, "gateway reload: no gateway is running: process %d of %s is gone (a stale pid file)\n", pid, pidFile)
		} else {
			fmt.Fprintf(stderr, "gateway reload: signalling process %d of %s: %v\n", pid, pidFile, err)
		}
		return 1
	}
	fmt.Fprintf(stdout, "sent SIGHUP to the gateway (pid %d); its log says what changed\n", pid)
	return 0
}

// reloadAdmin asks a gateway to reload through POST /admin/api/reload.
func reloadAdmin(base, token string, stdout, stderr io.Writer) int {
	if token == "" {
		token = os.Getenv("CHATGATE_ADMIN_TOKEN")
	}
	if token == "" {
		fmt.Fprintln(stderr, "gateway reload: -admin needs -token or $CHATGATE_ADMIN_TOKEN (a name: token of admin.tokens)")
		return 2
	}
	req, err := http.NewRequest(http.MethodPost, strings.TrimRight(base, "/")+"/admin/api/reload", nil)
	if err != nil {
		fmt.Fprintf(stderr, "gateway reload: %v\n", err)
		return 2
	}
	req.Header.Set("Authorization", "Bearer "+token)
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "gateway reload: no gateway answered at %s: %v\n", base, err)
		return 1
	}
	defer resp.Body.Close()
	var body struct {
		Error string `json:"error"`
	}
	json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body)
	switch {
	case resp.StatusCode == http.StatusOK:
		fmt.Fprintln(stdout, "the gateway reloaded its configuration; its log says what changed")
		return 0
	case resp.StatusCode == http.StatusUnauthorized:
		fmt.Fprintln(stderr, "gateway reload: the admin API refused the token (401)")
	case resp.StatusCode == http.StatusNotFound:
		fmt.Fprintf(stderr, "gateway reload: %s has no admin API (admin.tokens unset?)\n", base)
	case body.Error != "":
		fmt.Fprintln(stderr, "gateway reload: "+body.Error)
	default:
		fmt.Fprintf(stderr, "gateway reload: %s answered %s\n", base, resp.Status)
	}
	return 1
}
