package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/chatgate/chatgate/admin"
	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/bots/telegram"
	"github.com/chatgate/chatgate/config"
	"github.com/chatgate/chatgate/gateway"
	"github.com/chatgate/chatgate/locks"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// maxInputBytes bounds a stored message's text: a Telegram text document
// (up to telegram.MaxDocumentBytes) and its caption fit.
const maxInputBytes = telegram.MaxDocumentBytes + 64<<10

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
			Budget:    budgets(p),
			Reminders: reminderPolicy(p),
			Memory:    memoryPolicy(p),
		}
	}
	return out
}

// budgets is a channel's budgets as the session manager takes them.
func budgets(p config.Policy) sessions.BudgetPolicy {
	of := func(b config.Budget) sessions.Budget {
		return sessions.Budget{TokensPerDay: b.TokensPerDay.V, CostPerDay: b.CostPerDay.V, CostPerMonth: b.CostPerMonth.V}
	}
	bp := sessions.BudgetPolicy{Default: of(p.Budget)}
	if len(p.UserBudgets) > 0 {
		bp.Users = make(map[string]sessions.Budget, len(p.UserBudgets))
		for u, b := range p.UserBudgets {
			bp.Users[u] = of(b)
		}
	}
	return bp
}

// openStore opens the store: reaching the database is bounded by
// storage.timeout, its migration by ctx alone (a stop signal, for serve).
func openStore(ctx context.Context, cfg *config.Config, log *slog.Logger) (*store.DB, error) {
	return store.Open(ctx, cfg.Storage.Driver, cfg.Storage.DSN, store.OpenOptions{Logger: log, Timeout: cfg.Storage.Timeout.D()})
}

// commandLog is the store's log for a command other than serve: what
// it says on opening (a wait for another gateway's migration) goes to
// stderr, plainly, so that a command that waits does not wait silently.
func commandLog(stderr io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == slog.LevelKey {
				return slog.Attr{}
			}
			return a
		},
	}))
}

// openStorage opens the store; it is closed when serve returns (again,
// after the shutdown's flush).
func (s *server) openStorage(ctx context.Context) error {
	db, err := openStore(s.stopCtx, s.cfg, s.log) // a stop signal ends a long migration
	if err != nil {
		return fmt.Errorf("%s: storage: %w", s.cfg.File, err)
	}
	s.db = db
	s.onExit(func() { db.Close() })
	return nil
}

// startTelemetry starts tracing, on when OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT
// is set, and makes the metrics.
func (s *server) startTelemetry(ctx context.Context) error {
	tp, stopTracing, err := newTracing(ctx, os.LookupEnv, s.log)
	if err != nil {
		return err
	}
	s.tp, s.stopTracing = tp, stopTracing
	s.onExit(func() { stopTracing(context.Background()) }) // a failed start; the shutdown flushes first
	s.metrics = gateway.NewMetrics()
	return nil
}

// buildAgent builds the agent and, when it has one, the channels'
// transcriber.
func (s *server) buildAgent() {
	s.ag = newAgent(s.cfg)
	s.transcriber = newTranscriber(s.ag)
}

// startSessions builds the session manager and starts it: its heartbeat
// and sweeps (resets, retention purge) run from here on.
func (s *server) startSessions() error {
	// The admin stats' turns per second are counted on the way to metrics.
	s.turns = admin.CountTurns(s.metrics, nil)
	cfg := s.cfg
	mgr := sessions.New(s.db, s.ag, sessions.Options{
		Events:              s.db.Events(),
		TracerProvider:      s.tp,
		Observer:            s.turns,
		Policies:            policies(cfg),
		Instructions:        cfg.Agent.Instructions,
		Compactor:           newCompactor(cfg),
		Models:              models(cfg),
		ContextTokens:       cfg.Agent.OpenAI.ContextTokens,
		Locks:               locks.New(locks.Options{MaxEntries: cfg.Locks.MaxEntries, TTL: cfg.Locks.TTL.D()}),
		Logger:              s.log,
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
		MaxInputBytes:  maxInputBytes,
		Tools:          s.startTools(),
		MemoryTools:    s.cfg.ServesMemoryTools(),
		Media:          sessions.MediaLimits{MaxBytes: int64(s.cfg.Agent.Tools.Media.MaxBytes), MaxItems: s.cfg.Agent.Tools.Media.MaxItems},
		MaxToolRounds:  cfg.Agent.MaxRounds(),
		ApproveTimeout: cfg.Agent.ApproveTimeout(),
	})
	if err := mgr.Start(); err != nil {
		return fmt.Errorf("%s: %w", cfg.File, err)
	}
	s.mgr = mgr
	// The operator's schedules as /status, the opt-ins and the admin
	// see them; a reload sets them again.
	s.timetable = sessions.NewTimetable(s.db, nil)
	if list, err := operatorSchedules(cfg); err == nil { // buildScheduler reports an error
		s.timetable.Set(list)
	}
	mgr.Standing().UseTimetable(s.timetable)
	// Notes of archived conversations (session.memory.extract_on_reset),
	// listening before any sweep archives one.
	extractor := sessions.NewExtractor(mgr, s.db)
	extractor.Start()
	s.services = append(s.services, extractor.Stop)
	// The reset sweeps and the retention purge, at their times.
	s.sweeper = sessions.NewSweeper(mgr, s.log)
	if err := s.sweeper.Start(); err != nil {
		return fmt.Errorf("%s: %w", cfg.File, err)
	}
	s.services = append(s.services, s.sweeper.Stop)
	return s.buildScheduler()
}

// buildHTTP builds the HTTP server and the WebSocket channel; their routes
// are mounted once the admin API, which gates them, is built.
func (s *server) buildHTTP() {
	cfg, metrics := s.cfg, s.metrics
	s.srv = gateway.New(s.log)
	wsPolicy := cfg.Policy(config.ChannelWebSocket)
	wsCfg := cfg.Channels.WebSocket
	wsSess := gateway.SessionsOf(s.mgr)
	wsSess.Schedules = s.timetable
	s.ws = gateway.NewWebSocket(wsSess, gateway.WSOptions{
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
		Transcriber:         s.transcriber.channelTranscriber(),
		MaxAudioBytes:       int64(cfg.Agent.OpenAI.MaxAudioBytes),
		Logger:              s.log,
		TracerProvider:      s.tp, OnDeliveryFailed: func() { metrics.DeliveryFailed(gateway.Channel) },
	})
}

// startMetrics mounts /metrics, or serves it on metrics.listen.
func (s *server) startMetrics() error {
	metricsSrv, err := serveMetrics(s.cfg, s.metrics, s.srv, s.log)
	if err != nil {
		return fmt.Errorf("%s: metrics.listen: %w", s.cfg.File, err)
	}
	s.metricsSrv = metricsSrv
	return nil
}

// buildReloader builds what applies a changed bot.yaml (SIGHUP, the admin
// API's reload).
func (s *server) buildReloader() {
	reloadPath := s.cfg.File
	if reloadPath == config.EmbeddedName {
		reloadPath = s.path
	}
	s.reloads = &reloader{path: reloadPath, log: s.log, level: s.level, metrics: s.metrics, mgr: s.mgr, sweeper: s.sweeper, scheduler: s.scheduler, timetable: s.timetable, ws: s.ws,
		transcriber: s.transcriber, tools: s.liveTools, started: s.cfg, applied: s.cfg}
}

// mountAdmin mounts the admin API when admin.tokens is set.
func (s *server) mountAdmin() {
	// An admin drain refuses new WebSocket connections and webhook calls
	// (503) until the undrain; without admin.tokens nothing is gated.
	s.gate = func(h http.Handler) http.Handler { return h }
	if !s.cfg.AdminEnabled() {
		return
	}
	reloads := s.reloads
	opts := admin.Options{Tokens: s.cfg.Admin.Tokens, Store: s.db, Manager: s.mgr, Turns: s.turns, Logger: s.log, Timetable: s.timetable}
	if s.cfg.WebSocketEnabled() {
		opts.Connections = s.ws.Connections
	}
	opts.Reload = func(by string) error { return reloads.reload(by) }
	adm := admin.New(opts)
	adm.Register(s.srv.Handle)
	s.srv.AddCheck("admin", adm.ReadyCheck())
	s.gate = adm.Gate
}

// mountRoutes mounts the WebSocket channel and the web page, and adds the
// storage's readiness check.
func (s *server) mountRoutes() {
	cfg := s.cfg
	if cfg.WebSocketEnabled() {
		s.metrics.WatchWebSocket(s.ws)
		s.srv.Handle("GET /ws", s.gate(s.ws))
		s.srv.Handle("GET "+gateway.MediaPath+"{id}", s.gate(s.ws.MediaHandler()))
		switch {
		case cfg.AnonymousWebSocket():
			s.log.Warn("websocket: allow_anonymous: every client is a generated guest; set channels.websocket.auth_tokens to know your users")
		case s.ws.DevMode():
			s.log.Warn("websocket: no channels.websocket.auth_tokens: development mode on loopback, any client may name itself any user")
		}
	}
	if cfg.WebPageEnabled() {
		s.srv.Handle("GET /", gateway.WebPage())
	}
	s.srv.AddCheck("storage", storageCheck(s.db, s.mgr))
	s.srv.AddCheck("tools", toolsCheck(s.tools))
	s.srv.AddInfo("tools", toolsInfo(s.tools))
}

// listen binds gateway.listen and serves on it. The listener is bound
// before anything slow (the Bot API): /healthz answers at once and
// /readyz says what is not ready yet.
func (s *server) listen() error {
	ln, err := net.Listen("tcp", s.cfg.Gateway.Listen)
	if err != nil {
		return fmt.Errorf("%s: gateway.listen: %w", s.cfg.File, err)
	}
	s.ln = ln
	serveErr := make(chan error, 1)
	s.serveErr = serveErr
	srv := s.srv
	go func() { serveErr <- srv.Serve(ln) }()
	return nil
}

// startTelegram starts the Telegram bot when the channel is on. The bot
// connects in the background (Start retries getMe), so an unreachable or
// refusing Bot API server never delays the listener; /readyz names it
// until it is connected, and the rest of the gateway serves on.
func (s *server) startTelegram() {
	pollCtx, stopPolling := context.WithCancel(context.Background())
	s.onExit(stopPolling)
	pollDone := make(chan struct{})
	s.stopPolling, s.pollDone = stopPolling, pollDone
	if s.cfg.TelegramEnabled() {
		s.bot = s.buildBot()
	}
	bot := s.bot
	if bot == nil {
		close(pollDone)
		return
	}
	go func() {
		defer close(pollDone)
		if err := bot.Start(pollCtx); err != nil {
			s.log.Error(err.Error())
		}
	}()
	s.srv.AddCheck("telegram", botCheck(bot, "connecting to the Bot API"))
}

// buildBot builds the Telegram bot and mounts it: the reloader, the reset
// notices' metrics and the webhook. A bot that cannot be built is logged,
// and the gateway serves without it.
func (s *server) buildBot() *telegram.Bot {
	cfg, metrics := s.cfg, s.metrics
	tg := cfg.Channels.Telegram
	tgSess := telegram.SessionsOf(s.mgr)
	tgSess.Schedules = s.timetable
	bot, err := telegram.New(tgSess, telegram.Options{
		Elector: sessions.NewElector(s.db, s.mgr.ReplicaID()),
		Token:   tg.Token, APIURL: tg.APIURL, Mode: tg.Mode, PollTimeout: tg.PollTimeout.D(),
		WebhookURL: tg.Webhook.URL, WebhookSecret: tg.Webhook.Secret,
		AllowedUsers: tg.AllowedUsers, GroupPolicy: tg.GroupPolicy, GroupScope: tg.GroupScope,
		TracerProvider: s.tp, OnDeliveryFailed: func() { metrics.DeliveryFailed(telegram.Channel) },
		Format: tg.Format, AlbumWait: time.Duration(tg.AlbumWaitMS) * time.Millisecond,
		Vision: agent.ReadsImages(s.ag), MaxImageBytes: int64(tg.MaxImageBytes), MaxTextBytes: maxInputBytes,
		Transcriber: s.transcriber.channelTranscriber(), MaxAudioBytes: int64(cfg.Agent.OpenAI.MaxAudioBytes),
		Streaming: tg.Streaming, Edits: tg.Edits, NotifyResets: tg.NotifyResets,
		RatePerSecond: tg.RateLimit.PerSecond, RateBurst: tg.RateLimit.Burst,
		RateGlobalPerSecond: tg.RateLimit.GlobalPerSecond, RateGlobalBurst: tg.RateLimit.GlobalBurst,
		RateLimited: metrics.RateLimited(telegram.Channel),
		Logger:      s.log,
	})
	if err != nil {
		s.log.Error(err.Error())
		return nil
	}
	s.reloads.setBot(bot)
	if tg.NotifyResets {
		metrics.WatchResetNotices(func() (sent, dropped, failed int64) {
			st := bot.NoticeStats()
			return st.Sent, st.Dropped, st.Failed
		})
	}
	if tg.Mode == "webhook" {
		s.srv.Handle("POST "+tg.Webhook.Path, s.gate(bot.WebhookHandler()))
	}
	return bot
}

// markStarted writes the pid file, from which on `gateway reload` finds
// this process, and then turns readiness on: whoever sees the gateway
// ready finds its pid file written. SIGHUP reloads from here on.
func (s *server) markStarted() {
	removePid, err := writePidFile(s.cfg.Gateway.PidFile)
	if err != nil {
		s.log.Warn("gateway.pid_file: cannot write it; `gateway reload` will not find this process (kill -HUP still reloads)", slog.String("error", err.Error()))
	}
	s.onExit(removePid)
	s.srv.Started()
	hups, stopCtx, reloads := s.hups, s.stopCtx, s.reloads
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
	s.log.Info("chatgate started",
		slog.String("version", versionString()),
		slog.String("config", s.cfg.File),
		slog.String("url", "http://"+s.ln.Addr().String()),
		slog.String("storage", s.cfg.Storage.Driver),
		slog.String("agent", s.cfg.Agent.Backend),
		slog.String("pid_file", s.cfg.Gateway.PidFile),
		slog.String("gogc", gcString()))
}
