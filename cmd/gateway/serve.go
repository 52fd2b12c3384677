package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chatgate/chatgate/admin"
	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/bots/telegram"
	"github.com/chatgate/chatgate/config"
	"github.com/chatgate/chatgate/gateway"
	"github.com/chatgate/chatgate/internal/tracelog"
	"github.com/chatgate/chatgate/locks"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// loadConfig loads -c FILE, else ./bot.yaml when present, else the
// embedded defaults.
func loadConfig(path string) (*config.Config, error) {
	if path == "" {
		if _, err := os.Stat("bot.yaml"); err == nil {
			path = "bot.yaml"
		} else {
			return config.Embedded(os.LookupEnv)
		}
	}
	return config.Load(path, os.LookupEnv)
}

func configFlag(name string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs, fs.String("c", "", "configuration `FILE` (default ./bot.yaml, else embedded defaults)")
}

// parseConfig parses a command's flags and loads its configuration. On
// failure it has told the user and returns the exit code (2 for bad flags,
// 1 for a bad configuration).
func parseConfig(fs *flag.FlagSet, path *string, args []string, stderr io.Writer) (*config.Config, int) {
	if err := fs.Parse(args); err != nil {
		return nil, 2
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		printConfigErrors(stderr, err)
		return nil, 1
	}
	return cfg, 0
}

// newLogger returns the logger and its level, which a reload may change.
func newLogger(cfg *config.Config, w io.Writer) (*slog.Logger, *slog.LevelVar) {
	level := new(slog.LevelVar)
	level.Set(logLevel(cfg))
	opts := &slog.HandlerOptions{Level: level}
	// Lines logged during a turn carry its trace id (when tracing).
	if cfg.Log.Format == "json" {
		return slog.New(tracelog.Handler(slog.NewJSONHandler(w, opts))), level
	}
	return slog.New(tracelog.Handler(slog.NewTextHandler(w, opts))), level
}

func logLevel(cfg *config.Config) slog.Level {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Log.Level))
	return level
}

// maxInputBytes bounds a stored message's text: a Telegram text document
// (up to telegram.MaxDocumentBytes) and its caption fit.
const maxInputBytes = telegram.MaxDocumentBytes + 64<<10

func newAgent(cfg *config.Config) agent.Agent {
	if cfg.Agent.Backend == "openai" {
		o := cfg.Agent.OpenAI
		return agent.NewOpenAI(agent.OpenAIConfig{
			Name: cfg.Agent.Name, BaseURL: o.BaseURL, APIKey: o.APIKey, Model: o.Model,
			Timeout: o.Timeout.D(), MaxRetries: cfg.OpenAIMaxRetries(), Stream: cfg.OpenAIStream(),
			PricePer1KPrompt: o.PricePer1KPrompt, PricePer1KCompletion: o.PricePer1KCompletion,
			Vision: o.Vision, TranscriptionModel: o.TranscriptionModel,
		})
	}
	return agent.Echo{}
}

// newCompactor is the agent that writes compaction's summaries when
// session.compaction.model names a model of its own (nil: the agent
// writes them).
func newCompactor(cfg *config.Config) agent.Agent {
	model := cfg.Session.Compaction.Model
	if model == "" || cfg.Agent.Backend != "openai" {
		return nil
	}
	o := cfg.Agent.OpenAI
	return agent.NewOpenAI(agent.OpenAIConfig{
		Name: cfg.Agent.Name, BaseURL: o.BaseURL, APIKey: o.APIKey, Model: model,
		Timeout: o.Timeout.D(), MaxRetries: cfg.OpenAIMaxRetries(),
		PricePer1KPrompt: o.PricePer1KPrompt, PricePer1KCompletion: o.PricePer1KCompletion,
	})
}

// liveTranscriber is the channels' transcriber: the current agent's, so
// that a reload's new api_key, base_url or timeout reaches it too. Whether
// there is one at all (transcription_model) is read at start.
type liveTranscriber struct {
	cur atomic.Pointer[agent.Transcriber]
}

// newTranscriber returns the transcriber of ag, or nil when it has none.
func newTranscriber(ag agent.Agent) *liveTranscriber {
	t := agent.TranscriberOf(ag)
	if t == nil {
		return nil
	}
	lt := &liveTranscriber{}
	lt.cur.Store(&t)
	return lt
}

// follow takes the transcriber of a reloaded agent; one without (the
// model was taken out, which needs a restart) leaves the one in use.
func (lt *liveTranscriber) follow(ag agent.Agent) {
	if lt == nil {
		return
	}
	if t := agent.TranscriberOf(ag); t != nil {
		lt.cur.Store(&t)
	}
}

// Transcribe implements agent.Transcriber.
func (lt *liveTranscriber) Transcribe(ctx context.Context, audio io.Reader, name, mime string) (string, error) {
	return (*lt.cur.Load()).Transcribe(ctx, audio, name, mime)
}

// channelTranscriber is lt for a channel's options: a nil interface, not a
// nil pointer in one, when there is none.
func (lt *liveTranscriber) channelTranscriber() agent.Transcriber {
	if lt == nil {
		return nil
	}
	return lt
}

// policies turns the configuration's resolved policies into the session
// manager's.
func policies(cfg *config.Config) map[string]sessions.Policy {
	out := map[string]sessions.Policy{}
	for _, p := range cfg.Policies() {
		out[p.Channel] = sessions.Policy{
			MaxHistory: p.MaxHistory.V,
			Reset: sessions.ResetPolicy{
				Mode:     sessions.ResetMode(p.ResetMode.V),
				IdleFor:  time.Duration(p.IdleMinutes.V) * time.Minute,
				AtHour:   p.AtHour.V,
				Location: p.Location(),
			},
			Busy: sessions.BusyPolicy{
				Mode:        sessions.BusyMode(p.BusyMode.V),
				Debounce:    time.Duration(p.DebounceMS.V) * time.Millisecond,
				DebounceMax: time.Duration(p.DebounceMaxMS.V) * time.Millisecond,
				MaxBatch:    p.MaxBatch.V,
			},
			MaxHistoryTokens: p.MaxHistoryTokens.V,
			Compaction: sessions.CompactionPolicy{
				Enabled:  p.CompactionEnabled.V,
				KeepLast: p.CompactionKeepLast.V,
				Prompt:   p.CompactionPrompt.V,
			},
		}
	}
	return out
}

func openStore(ctx context.Context, cfg *config.Config, log *slog.Logger) (*store.DB, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return store.Open(ctx, cfg.Storage.Driver, cfg.Storage.DSN, store.OpenOptions{Logger: log, Timeout: cfg.Storage.Timeout.D()})
}

// A stop takes at most shutdown.drain_timeout + stopAllowance. The drain
// timeout covers running turns, sweeps, purges and Telegram's queued
// updates; the allowance is for what comes after it: up to interruptGrace
// for the turns the deadline cancelled to store their partial replies,
// the rest for closing the WebSocket connections (1001) and the HTTP
// server and flushing the store.
const (
	interruptGrace = 3 * time.Second
	stopAllowance  = 5 * time.Second
)

// storageCheck is the readiness check of the store: it answers a ping.
func storageCheck(db *store.DB, mgr *sessions.Manager) func() error {
	return func() error {
		if since, down := mgr.StorageDown(); down {
			// Every storage call of a turn has failed since then: the
			// turns wait (kept), and run once it answers again.
			return fmt.Errorf("unreachable since %s", since.UTC().Format(time.RFC3339))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := db.Ping(ctx); err != nil {
			return fmt.Errorf("ping failed: %w", err)
		}
		return nil
	}
}

// botState is what /readyz asks a channel bot that connects in the
// background: Ready once it reached its API, and Err, why not yet.
type botState interface {
	Ready() bool
	Err() error
}

// botCheck is the readiness check of a bot.
func botCheck(bot botState, connecting string) func() error {
	return func() error {
		if bot.Ready() {
			return nil
		}
		if err := bot.Err(); err != nil {
			return fmt.Errorf("%s (last error: %v)", connecting, err)
		}
		return errors.New(connecting)
	}
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, path := configFlag("serve", stderr)
	cfg, code := parseConfig(fs, path, args, stderr)
	if cfg == nil {
		return code
	}
	log, level := newLogger(cfg, stderr)
	for _, w := range cfg.Warnings {
		log.Warn(w)
	}
	// SIGHUP reloads bot.yaml. It is caught from here on, before the pid
	// file names this process: an early `gateway reload` never ends it.
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	defer signal.Stop(hups)

	// The first SIGINT/SIGTERM (or ctx) starts a graceful stop; a second
	// one cuts the drain short (the flush still happens).
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	stopCtx, stop := context.WithCancel(ctx)
	defer stop()
	hardCtx, hardStop := context.WithCancel(context.Background())
	defer hardStop()
	go func() {
		select {
		case s := <-sigs:
			log.Info("stopping: draining running turns", slog.String("signal", s.String()))
			stop()
		case <-stopCtx.Done():
		}
		select {
		case s := <-sigs:
			log.Warn("second signal: interrupting running turns now", slog.String("signal", s.String()))
			hardStop()
		case <-hardCtx.Done():
		}
	}()

	// Storage opens before the listener: a bad DSN is a start error.
	db, err := openStore(ctx, cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "%s: storage: %v\n", cfg.File, err)
		return 1
	}
	defer db.Close()

	// Tracing: on when OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set.
	tp, stopTracing, err := newTracing(ctx, os.LookupEnv, log)
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return 1
	}
	defer stopTracing(context.Background()) // early returns; the stop below flushes first
	metrics := gateway.NewMetrics()
	ag := newAgent(cfg)
	transcriber := newTranscriber(ag)
	// The admin stats' turns per second are counted on the way to metrics.
	turns := admin.CountTurns(metrics, nil)
	mgr := sessions.New(db, ag, sessions.Options{
		Events:              db.Events(),
		TracerProvider:      tp,
		Observer:            turns,
		Policies:            policies(cfg),
		Instructions:        cfg.Agent.Instructions,
		Compactor:           newCompactor(cfg),
		Locks:               locks.New(locks.Options{MaxEntries: cfg.Locks.MaxEntries, TTL: cfg.Locks.TTL.D()}),
		Logger:              log,
		RetentionDays:       cfg.Storage.RetentionDays,
		ResumeTTL:           cfg.Channels.WebSocket.ResumeTTL.D(),
		CacheBytes:          int64(cfg.Session.CacheBytes),
		RecoveryMaxAge:      cfg.Recovery.MaxAge.D(),
		RecoveryConcurrency: cfg.Recovery.Concurrency,
		NoRerun:             !cfg.RerunInterrupted(),
		InterruptGrace:      interruptGrace,
		DelayNotice:         cfg.DelayNotice(),
		// Room for a Telegram text document read into a message, beside
		// its caption; WebSocket text is bounded by max_frame_bytes.
		MaxInputBytes: maxInputBytes,
	})
	if err := mgr.Start(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cfg.File, err)
		return 1
	}

	srv := gateway.New(log)
	wsPolicy := cfg.Policy(config.ChannelWebSocket)
	wsCfg := cfg.Channels.WebSocket
	ws := gateway.NewWebSocket(mgr, gateway.WSOptions{
		AuthTokens:          wsCfg.AuthTokens,
		Anonymous:           cfg.AnonymousWebSocket(),
		AllowedOrigins:      wsCfg.AllowedOrigins,
		MaxFrameBytes:       int64(wsCfg.MaxFrameBytes),
		RatePerSecond:       wsCfg.RateLimit.PerSecond,
		RateBurst:           wsCfg.RateLimit.Burst,
		RateGlobalPerSecond: wsCfg.RateLimit.GlobalPerSecond,
		RateGlobalBurst:     wsCfg.RateLimit.GlobalBurst,
		RateLimited:         metrics.RateLimited(gateway.Channel),
		HistoryLimit:        max(wsPolicy.MaxHistory.V, 1),
		Transcriber:         transcriber.channelTranscriber(),
		MaxAudioBytes:       int64(cfg.Agent.OpenAI.MaxAudioBytes),
		Logger:              log,
		TracerProvider:      tp, OnDeliveryFailed: func() { metrics.DeliveryFailed(gateway.Channel) },
	})
	metricsSrv, err := serveMetrics(cfg, metrics, srv, log)
	if err != nil {
		fmt.Fprintf(stderr, "%s: metrics.listen: %v\n", cfg.File, err)
		mgr.Shutdown(context.Background())
		return 1
	}
	// An admin drain refuses new WebSocket connections and webhook calls
	// (503) until the undrain; without admin.tokens nothing is gated.
	gate := func(h http.Handler) http.Handler { return h }
	reloadPath := cfg.File
	if reloadPath == config.EmbeddedName {
		reloadPath = *path
	}
	reloads := &reloader{path: reloadPath, log: log, level: level, metrics: metrics, mgr: mgr, ws: ws,
		transcriber: transcriber, started: cfg, applied: cfg}
	if cfg.AdminEnabled() {
		opts := admin.Options{Tokens: cfg.Admin.Tokens, Store: db, Manager: mgr, Turns: turns, Logger: log}
		if cfg.WebSocketEnabled() {
			opts.Connections = ws.Connections
		}
		opts.Reload = func(by string) error { return reloads.reload(by) }
		adm := admin.New(opts)
		adm.Register(srv.Handle)
		srv.AddCheck("admin", adm.ReadyCheck())
		gate = adm.Gate
	}
	if cfg.WebSocketEnabled() {
		metrics.WatchWebSocket(ws)
		srv.Handle("GET /ws", gate(ws))
		switch {
		case cfg.AnonymousWebSocket():
			log.Warn("websocket: allow_anonymous: every client is a generated guest; set channels.websocket.auth_tokens to know your users")
		case ws.DevMode():
			log.Warn("websocket: no channels.websocket.auth_tokens: development mode on loopback, any client may name itself any user")
		}
	}
	if cfg.WebPageEnabled() {
		srv.Handle("GET /", gateway.WebPage())
	}
	srv.AddCheck("storage", storageCheck(db, mgr))
	// The listener is bound before anything slow (the Bot API): /healthz
	// answers at once and /readyz says what is not ready yet.
	ln, err := net.Listen("tcp", cfg.Gateway.Listen)
	if err != nil {
		fmt.Fprintf(stderr, "%s: gateway.listen: %v\n", cfg.File, err)
		mgr.Shutdown(context.Background())
		return 1
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	// Telegram: the bot connects in the background (Start retries getMe),
	// so an unreachable or refusing Bot API server never delays the
	// listener; /readyz names it until it is connected, and the rest of
	// the gateway serves on.
	pollCtx, stopPolling := context.WithCancel(context.Background())
	defer stopPolling()
	pollDone := make(chan struct{})
	var bot *telegram.Bot
	if cfg.TelegramEnabled() {
		tg := cfg.Channels.Telegram
		b, err := telegram.New(mgr, telegram.Options{
			Token: tg.Token, APIURL: tg.APIURL, Mode: tg.Mode, PollTimeout: tg.PollTimeout.D(),
			WebhookURL: tg.Webhook.URL, WebhookSecret: tg.Webhook.Secret,
			AllowedUsers: tg.AllowedUsers, GroupPolicy: tg.GroupPolicy, GroupScope: tg.GroupScope,
			TracerProvider: tp, OnDeliveryFailed: func() { metrics.DeliveryFailed(telegram.Channel) },
			Format: tg.Format,
			Vision: agent.ReadsImages(ag), MaxImageBytes: int64(tg.MaxImageBytes), MaxTextBytes: maxInputBytes,
			Transcriber: transcriber.channelTranscriber(), MaxAudioBytes: int64(cfg.Agent.OpenAI.MaxAudioBytes),
			Streaming: tg.Streaming, Edits: tg.Edits, NotifyResets: tg.NotifyResets,
			RatePerSecond: tg.RateLimit.PerSecond, RateBurst: tg.RateLimit.Burst,
			RateGlobalPerSecond: tg.RateLimit.GlobalPerSecond, RateGlobalBurst: tg.RateLimit.GlobalBurst,
			RateLimited: metrics.RateLimited(telegram.Channel),
			Logger:      log,
		})
		if err != nil {
			log.Error(err.Error())
		} else {
			bot = b
			reloads.setBot(b)
			if tg.NotifyResets {
				metrics.WatchResetNotices(func() (sent, dropped, failed int64) {
					st := bot.NoticeStats()
					return st.Sent, st.Dropped, st.Failed
				})
			}
			if tg.Mode == "webhook" {
				srv.Handle("POST "+tg.Webhook.Path, gate(bot.WebhookHandler()))
			}
		}
	}
	if bot != nil {
		go func() {
			defer close(pollDone)
			if err := bot.Start(pollCtx); err != nil {
				log.Error(err.Error())
			}
		}()
	} else {
		close(pollDone)
	}
	if bot != nil {
		srv.AddCheck("telegram", botCheck(bot, "connecting to the Bot API"))
	}
	srv.Started()
	removePid, err := writePidFile(cfg.Gateway.PidFile)
	if err != nil {
		log.Warn("gateway.pid_file: cannot write it; `gateway reload` will not find this process (kill -HUP still reloads)", slog.String("error", err.Error()))
	}
	defer removePid()
	go func() {
		for {
			select {
			case <-hups:
				reloads.reload("SIGHUP")
			case <-stopCtx.Done():
				return
			}
		}
	}()
	log.Info("chatgate started",
		slog.String("version", versionString()),
		slog.String("config", cfg.File),
		slog.String("url", "http://"+ln.Addr().String()),
		slog.String("storage", cfg.Storage.Driver),
		slog.String("agent", cfg.Agent.Backend),
		slog.String("pid_file", cfg.Gateway.PidFile))

	// The channels have registered how they deliver: the rescuer may run.
	mgr.StartRescuer()

	code = 0
	select {
	case <-stopCtx.Done():
	case err := <-serveErr:
		log.Error("http server failed", slog.String("error", err.Error()))
		code = 1
	}

	// Shutdown (DESIGN §8): one deadline, drain_timeout from the first
	// signal, for turns, sweeps, purges and queued Telegram updates; then
	// at most stopAllowance for storing interrupted replies, closing
	// connections and flushing the store. A second signal ends the drain
	// at once; the rest still happens.
	stopAt := time.Now()
	drainCtx, cancelDrain := context.WithDeadline(hardCtx, stopAt.Add(cfg.Shutdown.DrainTimeout.D()))
	defer cancelDrain()
	finishCtx, cancelFinish := context.WithDeadline(context.Background(), stopAt.Add(cfg.Shutdown.DrainTimeout.D()+stopAllowance))
	defer cancelFinish()

	// Readiness off, and the channels take no new work. The listener stays
	// open through the drain: /readyz answers 503, the webhook 503, and a
	// WebSocket upgrade 503.
	srv.Drain()
	ws.StopAccepting()
	if bot != nil {
		bot.StopTaking()
	}
	stopPolling()

	// The drain, in parallel. The manager interrupts what still runs at
	// the deadline and returns at most interruptGrace later.
	var drained sync.WaitGroup
	drained.Go(func() {
		if err := mgr.Shutdown(drainCtx); err != nil {
			log.Error("drain", slog.String("error", err.Error()))
			code = 1
		}
	})
	drained.Go(func() {
		select {
		case <-pollDone:
		case <-finishCtx.Done():
		}
		if bot != nil {
			// Updates still queued end quickly (the manager refuses them);
			// their offsets stay, and Telegram sends them again after the
			// restart.
			bot.Wait(finishCtx)
		}
	})
	drained.Wait()

	// Every reply that finished or was interrupted is stored and queued to
	// its connection: close the WebSocket connections with 1001 and the
	// HTTP server, in parallel, then flush the store.
	var closed sync.WaitGroup
	closed.Go(func() { ws.Shutdown(finishCtx) })
	closed.Go(func() {
		if err := srv.Shutdown(finishCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			log.Warn("http shutdown", slog.String("error", err.Error()))
		}
	})
	if metricsSrv != nil {
		closed.Go(func() { metricsSrv.Shutdown(finishCtx) })
	}
	closed.Wait()
	// The spans of the drained turns go out before the process ends.
	if err := stopTracing(finishCtx); err != nil {
		log.Warn("flushing traces", slog.String("error", err.Error()))
	}
	if err := db.Close(); err != nil {
		log.Error("closing storage", slog.String("error", err.Error()))
		code = 1
	}
	log.Info("chatgate stopped")
	return code
}

func printConfigErrors(w io.Writer, err error) {
	var errs config.Errors
	if errors.As(err, &errs) {
		for _, e := range errs {
			fmt.Fprintln(w, e.Error())
		}
		return
	}
	fmt.Fprintln(w, strings.TrimSpace(err.Error()))
}
