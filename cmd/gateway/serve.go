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
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/chatgate/chatgate/admin"
	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/bots/telegram"
	"github.com/chatgate/chatgate/config"
	"github.com/chatgate/chatgate/gateway"
	"github.com/chatgate/chatgate/internal/tracelog"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
	"github.com/chatgate/chatgate/tools/mcpclient"
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

// serve runs the gateway until the first SIGINT/SIGTERM (or ctx), then
// stops it gracefully.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, path := configFlag("serve", stderr)
	cfg, code := parseConfig(fs, path, args, stderr)
	if cfg == nil {
		return code
	}
	s := newServer(cfg, *path, stderr)
	defer s.release()
	if err := s.start(ctx); err != nil {
		return s.failed(err)
	}
	return s.shutdown(s.wait())
}

// start builds and starts every part of the gateway; an error ends the
// start (serve reports it through failed). Each step uses what the ones
// before it built, and their order matters: storage before the listener
// (a bad DSN is a start error), the listener before the Bot API (slow,
// and retried in the background), the rescuer last.
func (s *server) start(ctx context.Context) error {
	s.catchSignals(ctx)
	if err := s.openStorage(ctx); err != nil {
		return err
	}
	if err := s.startTelemetry(ctx); err != nil {
		return err
	}
	s.buildAgent()
	if err := s.startSessions(); err != nil {
		return err
	}
	s.buildHTTP()
	if err := s.startMetrics(); err != nil {
		return err
	}
	s.buildReloader()
	s.mountAdmin()
	s.mountRoutes()
	if err := s.listen(); err != nil {
		return err
	}
	s.startTelegram()
	s.markStarted()
	// The channels have registered how they deliver and their listeners:
	// the other replicas' events may come in, and the rescuer run.
	rescuer := s.mgr.Rescuer()
	rescuer.Listen()
	rescuer.Start()
	s.services = append(s.services, rescuer.Stop)
	return s.startScheduler()
}

// server holds the parts of a running gateway, each set by the step of
// serve that builds it.
type server struct {
	cfg    *config.Config
	path   string // -c as given: what a reload re-reads under the embedded defaults
	stderr io.Writer
	log    *slog.Logger
	level  *slog.LevelVar // a reload may change it

	hups    chan os.Signal
	stopCtx context.Context // done at the first signal (or ctx): the graceful stop
	hardCtx context.Context // done at the second: the drain ends at once

	db          *store.DB
	tp          trace.TracerProvider // nil without tracing
	stopTracing func(context.Context) error
	metrics     *gateway.Metrics
	ag          agent.Agent
	transcriber *liveTranscriber // nil without transcription
	turns       *admin.TurnCounter
	mgr         *sessions.Manager // set once started: a later failed start stops it
	sweeper     *sessions.Sweeper
	scheduler   *sessions.Scheduler
	timetable   *sessions.Timetable // the operator's schedules, for /status, opt-ins and admin
	// services stop the background parts beside the session manager
	// (stopServices), in the order they were started.
	services  []func()
	tools     *mcpclient.Set // agent.tools.servers and the reminder tools
	liveTools *liveTools

	srv        *gateway.Server
	ws         *gateway.WebSocket
	metricsSrv *http.Server // nil without metrics.listen
	reloads    *reloader
	gate       func(http.Handler) http.Handler
	ln         net.Listener
	serveErr   chan error

	bot         *telegram.Bot // nil without Telegram
	stopPolling context.CancelFunc
	pollDone    chan struct{}

	exits []func()
}

// newServer starts with the logger, which every step logs to, and logs
// the configuration's warnings.
func newServer(cfg *config.Config, path string, stderr io.Writer) *server {
	log, level := newLogger(cfg, stderr)
	for _, w := range cfg.Warnings {
		log.Warn(w)
	}
	return &server{cfg: cfg, path: path, stderr: stderr, log: log, level: level}
}

// onExit registers f to run when serve returns, whether the start failed
// or the shutdown ran: the steps' defers, which cannot live in serve's
// frame.
func (s *server) onExit(f func()) { s.exits = append(s.exits, f) }

// release runs what onExit registered, newest first, as defers do (a
// panicking one does not skip the rest).
func (s *server) release() {
	for _, f := range s.exits {
		defer f()
	}
}

// stopServices stops the background services, newest first: they start
// no more work, and what they started is the session manager's to drain.
func (s *server) stopServices() {
	for i := len(s.services) - 1; i >= 0; i-- {
		s.services[i]()
	}
	s.services = nil
}

// failed ends a start that could not finish: err goes to stderr, then the
// services and the session manager, if they have started, are stopped.
// The exit code is 1.
func (s *server) failed(err error) int {
	fmt.Fprintln(s.stderr, err)
	s.stopServices()
	if s.mgr != nil {
		s.mgr.Shutdown(context.Background())
	}
	return 1
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
