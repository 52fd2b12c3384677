package mcpclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"runtime/debug"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// terminateAfter is how long a stdio server has to exit once its stdin
// is closed before it is sent SIGTERM (and as long again before SIGKILL).
const terminateAfter = 2 * time.Second

// supervise keeps a session open to the server until ctx ends: each
// session that fails to start or ends is followed, after the backoff, by
// a new one (a new process for a stdio server). An explicit Transport is
// connected once.
func (s *Set) supervise(ctx context.Context, sv *server) {
	var wait time.Duration
	for {
		began := time.Now()
		err := sv.scrub.err(s.serve(ctx, sv)) // it leaves the session here: for the status and the logs
		if ctx.Err() != nil {
			return
		}
		s.update(func() { sv.lastErr = err })
		if sv.cfg.Transport != nil {
			sv.log.Error("tool server session ended; it is not restarted", slog.Any("error", err))
			return
		}
		wait = s.backoff.next(wait, time.Since(began))
		sv.log.Warn("tool server down; starting it again", slog.Any("error", err), slog.Duration("retry_in", wait))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// serve runs one session: connect, list the tools, then relist on every
// list_changed until the session ends (or ctx does: the session is
// closed). It returns why the session failed or ended.
func (s *Set) serve(ctx context.Context, sv *server) error {
	t, cmd := sv.transport()
	connectCtx, cancel := context.WithTimeout(ctx, sv.cfg.Timeout)
	cs, err := sv.client.Connect(connectCtx, t, nil)
	cancel()
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = cs.Close() })
	defer stop()
	defer cs.Close() // a stdio server's process is waited for here
	s.update(func() {
		sv.session = cs
		sv.connects++
		if cmd != nil && cmd.Process != nil {
			sv.pid = cmd.Process.Pid
		}
	})
	defer s.update(func() { sv.session, sv.listed, sv.pid = nil, false, 0 })

	if err := s.list(ctx, sv, cs); err != nil {
		return err
	}
	ended := make(chan error, 1)
	go func() { ended <- cs.Wait() }()
	for {
		select {
		case err := <-ended:
			if err == nil {
				err = errors.New("the session ended")
			}
			return err
		case <-sv.relist:
			if err := s.list(ctx, sv, cs); err != nil && ctx.Err() == nil {
				sv.log.Warn("tool list changed but listing it failed; keeping the last one", slog.Any("error", sv.scrub.err(err)))
			}
		}
	}
}

// transport is how to reach the server for a new session; cmd is a
// stdio server's process (started by Connect).
func (sv *server) transport() (t mcp.Transport, cmd *exec.Cmd) {
	c := sv.cfg
	switch {
	case c.Transport != nil:
		return c.Transport, nil
	case c.URL != "":
		return &mcp.StreamableClientTransport{
			Endpoint:   c.URL,
			HTTPClient: &http.Client{Transport: headers{base: http.DefaultTransport, set: c.Headers}},
		}, nil
	default:
		if len(c.Supervisor) > 0 {
			cmd = exec.Command(c.Supervisor[0], append(append(slices.Clone(c.Supervisor[1:]), c.Command), c.Args...)...)
		} else {
			cmd = exec.Command(c.Command, c.Args...)
		}
		cmd.SysProcAttr = diesWithGateway(len(c.Supervisor) > 0)
		cmd.Env = os.Environ()
		for _, k := range slices.Sorted(maps.Keys(c.Env)) {
			cmd.Env = append(cmd.Env, k+"="+c.Env[k])
		}
		cmd.Stderr = &stderrLog{log: sv.log}
		return &mcp.CommandTransport{Command: cmd, TerminateDuration: terminateAfter}, cmd
	}
}

// headers adds the configured headers to every request of a streamable
// HTTP session.
type headers struct {
	base http.RoundTripper
	set  map[string]string
}

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(h.set) > 0 {
		r = r.Clone(r.Context())
		for k, v := range h.set {
			r.Header.Set(k, v)
		}
	}
	return h.base.RoundTrip(r)
}

// How a Set's log lines name things: ServerLogKey is the attribute
// naming the server on each line about one, and StderrMessage the
// message of the lines that carry what a stdio server wrote on its
// stderr (one line each, attribute "line").
const (
	ServerLogKey  = "mcp_server"
	StderrMessage = "tool server stderr"
)

// stderrLog logs a stdio server's stderr, a line at a time (a line is
// cut at maxLine bytes). Only the process's copier writes to it.
type stderrLog struct {
	log *slog.Logger
	buf []byte
}

const maxLine = 4 << 10

func (w *stderrLog) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.emit(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) >= maxLine {
		w.emit(w.buf)
		w.buf = nil
	}
	w.buf = slices.Clip(w.buf)
	return len(p), nil
}

func (w *stderrLog) emit(line []byte) {
	line = bytes.TrimRight(line, "\r")
	if len(line) > 0 {
		w.log.Info(StderrMessage, slog.String("line", string(line)))
	}
}

// version is the gateway's module version, as the servers are told it.
func version() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "dev"
}
