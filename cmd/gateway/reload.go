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
	sweeper *sessions.Sweeper
	// scheduler takes the schedules of every reload that changed them.
	scheduler *sessions.Scheduler
	// timetable takes the schedules of every reload.
	timetable *sessions.Timetable
	ws        *gateway.WebSocket
	bot       *telegram.Bot // nil without Telegram
	// transcriber follows the agent (nil without transcription).
	transcriber *liveTranscriber
	// tools follows session.tools and session.schedules.enabled.
	tools *liveTools

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
	changed, _ := changedKeys(r.applied, cfg)
	r.apply(cfg)
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

// apply hands the new values to the consumers. The session manager's
// part is compared whole, as it is resolved, and handed down when it
// differs; the channels take theirs every time.
func (r *reloader) apply(cfg *config.Config) {
	old := r.applied
	// The policies are compared as resolved, every field of
	// config.Policy: budgets, tool lists and whatever comes next
	// included.
	policiesChanged := !config.SamePolicies(old.Policies(), cfg.Policies())
	// agent includes the instructions.
	agentChanged := !reflect.DeepEqual(old.Agent, cfg.Agent) || old.Session.Compaction.Model != cfg.Session.Compaction.Model
	if policiesChanged || agentChanged {
		s := sessions.Settings{Policies: policies(cfg), Instructions: cfg.Agent.Instructions}
		if agentChanged {
			// The new agent writes the turns that start from now on; a
			// running turn finishes with the one it called.
			s.Agent, s.Compactor = newAgent(cfg), newCompactor(cfg)
			s.Models, s.ContextTokens = models(cfg), cfg.Agent.OpenAI.ContextTokens
			r.transcriber.follow(s.Agent)
		}
		r.mgr.Reconfigure(s)
		if err := r.sweeper.Reschedule(); err != nil {
			r.log.Error("reload: sweeps", slog.String("error", err.Error()))
		}
		r.tools.follow(cfg)
	}
	if !reflect.DeepEqual(old.Schedules, cfg.Schedules) {
		// Checked with the rest of the file before it was applied.
		if list, err := operatorSchedules(cfg); err != nil {
			r.log.Error("reload: schedules", slog.String("error", err.Error()))
		} else {
			r.scheduler.SetSchedules(list)
			r.timetable.Set(list)
		}
	}
	if old.DelayNotice() != cfg.DelayNotice() {
		r.mgr.Health().SetDelayNotice(cfg.DelayNotice())
	}
	// The channels take their settings on every reload: they are cheap
	// to hand over, and the bot sets its command menu again when the
	// agent's models were turned on or off.
	r.ws.Reconfigure(wsSettings(cfg))
	if r.bot != nil {
		r.bot.Reconfigure(botSettings(cfg))
	}
	if logLevel(old) != logLevel(cfg) {
		r.level.Set(logLevel(cfg))
	}
}

// wsSettings is what a reload hands the WebSocket channel.
func wsSettings(cfg *config.Config) gateway.WSSettings {
	ws := cfg.Channels.WebSocket
	return gateway.WSSettings{
		AuthTokens: ws.AuthTokens, Anonymous: cfg.AnonymousWebSocket(),
		RatePerSecond: ws.RateLimit.PerSecond, RateBurst: ws.RateLimit.Burst,
		RateGlobalPerSecond: ws.RateLimit.GlobalPerSecond, RateGlobalBurst: ws.RateLimit.GlobalBurst,
		HistoryLimit: max(cfg.Policy(config.ChannelWebSocket).MaxHistory.V, 1),
	}
}

// botSettings is what a reload hands the Telegram bot.
func botSettings(cfg *config.Config) telegram.Settings {
	tg := cfg.Channels.Telegram
	return telegram.Settings{
		AllowedUsers: tg.AllowedUsers, GroupPolicy: tg.GroupPolicy,
		RatePerSecond: tg.RateLimit.PerSecond, RateBurst: tg.RateLimit.Burst,
		RateGlobalPerSecond: tg.RateLimit.GlobalPerSecond, RateGlobalBurst: tg.RateLimit.GlobalBurst,
	}
}

// reloadKey is a key of bot.yaml, or a section whose keys all behave
// alike, and what a reload does with a change of it. reloadKeys holds
// every key; docs/configuration.md shows the same table (a test holds
// them equal, and holds reloadKeys to config.Keys).
type reloadKey struct {
	// path is the key; "<c>" stands for each channel.
	path string
	// live: a reload applies it to the next turn, update and connection.
	// Otherwise it is read at start only, and a changed value is named
	// in the reload's log as needing a restart.
	live bool
	// restart, when set, is what of the key is read at start only:
	// when it changes, the key is named as needing a restart (the rest
	// of a live key's change applies). Unset: the value as written, for
	// a key that is not live.
	restart func(*config.Config) any
	// note is what the documentation's table says beside live or
	// restart.
	note string
}

// reloadKeys is every key of bot.yaml and whether a reload applies it, in
// the order of the documentation's table.
var reloadKeys = []reloadKey{
	{path: "gateway.listen"},
	{path: "gateway.pid_file"},
	{path: "storage.driver"},
	{path: "storage.dsn"},
	{path: "storage.retention_days"},
	{path: "storage.timeout"},
	{path: "agent.backend", live: true},
	{path: "agent.name", live: true},
	{path: "agent.instructions", live: true},
	{path: "agent.openai.base_url", live: true},
	{path: "agent.openai.api_key", live: true},
	{path: "agent.openai.model", live: true},
	{path: "agent.openai.timeout", live: true},
	{path: "agent.openai.max_retries", live: true},
	{path: "agent.openai.stream", live: true},
	{path: "agent.openai.price_per_1k_prompt", live: true},
	{path: "agent.openai.price_per_1k_completion", live: true},
	{path: "agent.openai.context_tokens", live: true},
	{path: "agent.openai.vision"},
	{path: "agent.openai.transcription_model", live: true, restart: startOnly((*config.Config).Transcribes),
		note: "another model applies; turning it on or off needs a restart"},
	{path: "agent.openai.max_audio_bytes"},
	{path: "agent.models", live: true},
	{path: "agent.tools"},
	{path: "session.max_history", live: true},
	{path: "session.max_history_tokens", live: true},
	{path: "session.reset", live: true, note: "every key of it; the sweeps are scheduled again"},
	{path: "session.compaction", live: true, note: "every key of it"},
	{path: "session.busy_mode", live: true},
	{path: "session.debounce_ms", live: true},
	{path: "session.debounce_max_ms", live: true},
	{path: "session.max_batch", live: true},
	{path: "session.cache_bytes"},
	{path: "session.delay_notice", live: true},
	{path: "session.tools", live: true, note: "which of the running servers are offered"},
	{path: "session.limits", live: true, note: "every key of it, `users` included"},
	{path: "session.schedules", live: true, note: "every key of it: the reminder tools are offered or withdrawn from the next turn"},
	{path: "session.memory", live: true, note: "every key of it, `users` included: the next turn reads its notes, and is offered the memory tools, by the new values"},
	{path: "channels.<c>.max_history", live: true},
	{path: "channels.<c>.session", live: true, note: "as the same keys of `session`"},
	{path: "locks"},
	{path: "channels.websocket.enabled", restart: startOnly((*config.Config).WebSocketEnabled)},
	{path: "channels.websocket.web_page", restart: startOnly((*config.Config).WebPageEnabled)},
	{path: "channels.websocket.auth_tokens", live: true, note: "new connections; an open one keeps its principal"},
	{path: "channels.websocket.allow_anonymous", live: true},
	{path: "channels.websocket.allowed_origins"},
	{path: "channels.websocket.max_frame_bytes"},
	{path: "channels.websocket.rate_limit", live: true},
	{path: "channels.websocket.resume_ttl"},
	{path: "channels.telegram.token"},
	{path: "channels.telegram.api_url"},
	{path: "channels.telegram.mode"},
	{path: "channels.telegram.poll_timeout"},
	{path: "channels.telegram.webhook"},
	{path: "channels.telegram.allowed_users", live: true},
	{path: "channels.telegram.group_policy", live: true},
	{path: "channels.telegram.group_scope"},
	{path: "channels.telegram.streaming"},
	{path: "channels.telegram.edits"},
	{path: "channels.telegram.format"},
	{path: "channels.telegram.max_image_bytes"},
	{path: "channels.telegram.album_wait_ms"},
	{path: "channels.telegram.notify_resets"},
	{path: "channels.telegram.rate_limit", live: true},
	{path: "shutdown"},
	{path: "recovery"},
	{path: "log.level", live: true},
	{path: "log.format"},
	{path: "metrics"},
	{path: "admin"},
	{path: "schedules", live: true, note: "each schedule's next fire is planned again; fires planned at times a schedule no longer has, or of a removed one, are dropped"},
}

// startOnly is a reloadKey's restart of an effective value.
func startOnly[T comparable](f func(*config.Config) T) func(*config.Config) any {
	return func(c *config.Config) any { return f(c) }
}

// paths are the key's paths, one a channel for a "<c>" key.
func (k reloadKey) paths() []string {
	if !strings.Contains(k.path, "<c>") {
		return []string{k.path}
	}
	return []string{
		strings.Replace(k.path, "<c>", config.ChannelWebSocket, 1),
		strings.Replace(k.path, "<c>", config.ChannelTelegram, 1),
	}
}

// changedKeys names the keys whose value in cfg differs from the one in
// old: the live ones (applied) and those that need a restart.
func changedKeys(old, cfg *config.Config) (live, restart []string) {
	for _, k := range reloadKeys {
		for _, p := range k.paths() {
			a, _ := old.Lookup(p)
			b, _ := cfg.Lookup(p)
			changed := !reflect.DeepEqual(a, b)
			if k.restart != nil {
				if k.restart(old) != k.restart(cfg) {
					restart = append(restart, p)
				} else if k.live && changed {
					live = append(live, p)
				}
				continue
			}
			if changed && k.live {
				live = append(live, p)
			} else if changed {
				restart = append(restart, p)
			}
		}
	}
	return live, restart
}

// restartKeys names the keys whose new value differs from the one the
// process started with and which are only read at start.
func restartKeys(old, cfg *config.Config) []string {
	_, keys := changedKeys(old, cfg)
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
