package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/bots/telegram"
	"github.com/chatgate/chatgate/config"
	"github.com/chatgate/chatgate/gateway"
	"github.com/chatgate/chatgate/locks"
	"github.com/chatgate/chatgate/sessions"
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

func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func newAgent(cfg *config.Config) agent.Agent {
	if cfg.Agent.Backend == "openai" {
		o := cfg.Agent.OpenAI
		return agent.NewOpenAI(agent.OpenAIConfig{
			Name: cfg.Agent.Name, BaseURL: o.BaseURL, APIKey: o.APIKey, Model: o.Model,
			Timeout: o.Timeout.D(), MaxRetries: cfg.OpenAIMaxRetries(), Stream: cfg.OpenAIStream(),
			PricePer1KPrompt: o.PricePer1KPrompt, PricePer1KCompletion: o.PricePer1KCompletion,
		})
	}
	return agent.Echo{}
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
		}
	}
	return out
}

func openStore(ctx context.Context, cfg *config.Config, log *slog.Logger) (*sessions.DB, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return sessions.Open(ctx, cfg.Storage.Driver, cfg.Storage.DSN, sessions.OpenOptions{Logger: log})
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, path := configFlag("serve", stderr)
	cfg, code := parseConfig(fs, path, args, stderr)
	if cfg == nil {
		return code
	}
	log := newLogger(cfg, stderr)
	for _, w := range cfg.Warnings {
		log.Warn(w)
	}

	// The first SIGINT/SIGTERM (or ctx) starts a graceful stop; a second
	// one cuts the drain short.
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

	store, err := openStore(ctx, cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "%s: storage: %v\n", cfg.File, err)
		return 1
	}
	defer store.Close()

	metrics := gateway.NewMetrics()
	mgr := sessions.New(store, newAgent(cfg), sessions.Options{
		Observer:            metrics,
		Policies:            policies(cfg),
		Instructions:        cfg.Agent.Instructions,
		Locks:               locks.New(locks.Options{MaxEntries: cfg.Locks.MaxEntries, TTL: cfg.Locks.TTL.D()}),
		Logger:              log,
		RetentionDays:       cfg.Storage.RetentionDays,
		RecoveryMaxAge:      cfg.Recovery.MaxAge.D(),
		RecoveryConcurrency: cfg.Recovery.Concurrency,
		NoRerun:             !cfg.RerunInterrupted(),
	})
	if err := mgr.Start(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cfg.File, err)
		return 1
	}

	srv := gateway.New(log)
	wsPolicy := cfg.Policy(config.ChannelWebSocket)
	wsCfg := cfg.Channels.WebSocket
	ws := gateway.NewWebSocket(mgr, gateway.WSOptions{
		AuthTokens:     wsCfg.AuthTokens,
		AllowedOrigins: wsCfg.AllowedOrigins,
		MaxFrameBytes:  int64(wsCfg.MaxFrameBytes),
		RatePerSecond:  wsCfg.RateLimit.PerSecond,
		RateBurst:      wsCfg.RateLimit.Burst,
		HistoryLimit:   max(wsPolicy.MaxHistory.V, 1),
		Logger:         log,
	})
	srv.Handle("GET /metrics", metrics.Handler())
	if cfg.WebSocketEnabled() {
		metrics.WatchWebSocket(ws)
		srv.Handle("GET /ws", ws)
		if ws.DevMode() {
			log.Warn("websocket: no channels.websocket.auth_tokens: development mode, any client may name itself any user")
		}
	}
	if cfg.WebPageEnabled() {
		srv.Handle("GET /", gateway.WebPage())
	}
	// Telegram: the bot connects in the background (Start retries getMe),
	// so an unreachable or refusing Bot API server never delays the
	// listener; it is logged, and the rest of the gateway serves on.
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
			Logger: log,
		})
		if err != nil {
			log.Error(err.Error())
		} else {
			bot = b
			if tg.Mode == "webhook" {
				srv.Handle("POST "+tg.Webhook.Path, bot.WebhookHandler())
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
	ln, err := net.Listen("tcp", cfg.Gateway.Listen)
	if err != nil {
		fmt.Fprintf(stderr, "%s: gateway.listen: %v\n", cfg.File, err)
		mgr.Shutdown(context.Background())
		return 1
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	srv.SetReady(true)
	log.Info("chatgate started",
		slog.String("version", versionString()),
		slog.String("config", cfg.File),
		slog.String("url", "http://"+ln.Addr().String()),
		slog.String("storage", cfg.Storage.Driver),
		slog.String("agent", cfg.Agent.Backend))

	// The channels have registered how they deliver: the rescuer may run.
	mgr.StartRescuer()

	code = 0
	select {
	case <-stopCtx.Done():
	case err := <-serveErr:
		log.Error("http server failed", slog.String("error", err.Error()))
		code = 1
	}

	// Shutdown: readiness off and no new connections, then drain turns for
	// drain_timeout (or until a second signal), then interrupt the rest.
	srv.SetReady(false)
	ws.StopAccepting()
	if bot != nil {
		bot.StopTaking()
	}
	stopPolling()
	<-pollDone
	httpCtx, cancelHTTP := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelHTTP()
	if err := srv.Shutdown(httpCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		log.Warn("http shutdown", slog.String("error", err.Error()))
	}
	drainCtx, cancelDrain := context.WithTimeout(hardCtx, cfg.Shutdown.DrainTimeout.D())
	defer cancelDrain()
	if err := mgr.Shutdown(drainCtx); err != nil {
		log.Error("drain", slog.String("error", err.Error()))
		code = 1
	}
	if bot != nil {
		// Updates still queued end quickly (the manager refuses them); their
		// offsets stay, and Telegram sends them again after the restart.
		botCtx, cancelBot := context.WithTimeout(context.Background(), 5*time.Second)
		bot.Wait(botCtx)
		cancelBot()
	}
	// Every reply that finished or was interrupted is stored and queued to
	// its connection; now close them all with 1001.
	wsCtx, cancelWS := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelWS()
	ws.Shutdown(wsCtx)
	if err := store.Close(); err != nil {
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
