package telegram

// Starting and stopping: connecting (getMe, retried in the background so
// an unreachable Bot API never holds up the gateway), setting the command
// menu, then polling or the webhook; on shutdown, taking no more updates
// and waiting for the queued ones and their replies.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Start connects (getMe, retried with backoff until it succeeds or ctx
// ends) and registers the commands; then, in webhook mode, it registers
// the webhook (retried likewise) and returns, and in polling mode it polls
// whenever this replica holds the bot's poller role, until ctx ends.
func (b *Bot) Start(ctx context.Context) error {
	b.ctx.setPoll(ctx)
	if !b.connect(ctx) {
		return nil
	}
	b.setMenu(ctx)
	if b.opts.Mode == "webhook" {
		b.setWebhook(ctx)
		return nil
	}
	b.pollWhileLeading(ctx)
	return nil
}

// connect calls getMe until it succeeds (true) or ctx ends (false). Each
// new kind of failure is logged once as one line, without the token.
func (b *Bot) connect(ctx context.Context) bool {
	wait := time.Duration(0)
	logged := ""
	for {
		self, err := b.api.GetMe()
		if err == nil {
			b.self.Store(&self)
			b.setErr(nil)
			// Only now can the bot deliver what the rescuer finds: until
			// here its turns are left for later (or another replica).
			b.registerOnce.Do(func() {
				b.sess.Register(Channel, b.route(true))
				close(b.connected)
			})
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		err = fmt.Errorf("telegram: cannot start the bot: %s", b.redact(err))
		b.setErr(err)
		wait = grow(wait, time.Second, time.Minute)
		if msg := err.Error(); msg != logged {
			logged = msg
			b.log.Error(msg + "; retrying in the background")
		}
		if b.opts.Sleep(ctx, wait) != nil {
			return false
		}
	}
}

// Ready reports whether the bot has connected (getMe succeeded).
func (b *Bot) Ready() bool { return b.self.Load() != nil }

// Err is the last start-up failure (nil once connected): a rejected token,
// an unreachable Bot API server. The token never appears in it.
func (b *Bot) Err() error {
	b.startMu.Lock()
	defer b.startMu.Unlock()
	return b.lastErr
}

func (b *Bot) setErr(err error) {
	b.startMu.Lock()
	b.lastErr = err
	b.startMu.Unlock()
}

// ctxClient is the HTTP client given to the library, whose requests carry
// no context: getUpdates and the start-up calls get the polling context,
// so stopping (or losing the poller role) cancels a long poll or a hanging
// start at once, while replies still go out during the drain.
//
// A request is bounded by its progress, not by its whole time: it fails
// once nothing has moved for idle — no byte of its body taken, no answer,
// no byte of the answer read. A 50 MiB file going up a slow link takes
// as long as its bytes keep going, where one bound on the whole request
// cut it off each try (and, after its body was written, left it unsure).
type ctxClient struct {
	client *http.Client
	idle   time.Duration
	mu     sync.Mutex
	poll   context.Context
	// now and after are the stall watch's clock (nil: time.Now and
	// time.After); the tests move a fake one.
	now   func() time.Time
	after func(time.Duration) <-chan time.Time
}

// startCalls are the calls that end when polling stops.
var startCalls = []string{"/getUpdates", "/getMe", "/setWebhook", "/deleteWebhook", "/setMyCommands"}

func (c *ctxClient) Do(req *http.Request) (*http.Response, error) {
	for _, m := range startCalls {
		if strings.HasSuffix(req.URL.Path, m) {
			c.mu.Lock()
			ctx := c.poll
			c.mu.Unlock()
			req = req.WithContext(ctx)
			break
		}
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	w := c.watch(cancel)
	end := func() {
		w.stop()
		cancel(nil)
	}
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = &moving{ReadCloser: req.Body, w: w}
		if get := req.GetBody; get != nil {
			// A body the transport sends again (a kept connection found
			// closed) moves the watch as the first did.
			req.GetBody = func() (io.ReadCloser, error) {
				body, err := get()
				if err != nil {
					return nil, err
				}
				return &moving{ReadCloser: body, w: w}, nil
			}
		}
	}
	// Whether the request went out whole: a failure before that (a
	// connection refused, reset or timed out while the body was being
	// written) means the Bot API never had it to act on (notWritten).
	var wrote atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			wrote.Store(i.Err == nil)
			w.moved() // the answer's wait starts
		},
	}))
	resp, err := c.client.Do(req)
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, errStalled) && !errors.Is(err, errStalled) {
			err = fmt.Errorf("%w: %w", cause, err)
		}
		end()
		if !wrote.Load() {
			return nil, &notWritten{err: err}
		}
		return nil, err
	}
	resp.Body = &moving{ReadCloser: resp.Body, w: w, end: end}
	if resp.StatusCode >= 400 {
		if err := describeFailure(req, resp); err != nil {
			if resp.StatusCode < 500 {
				// A 4xx status is the Bot API refusing the request: it
				// did not act on it, whatever its answer went on to say.
				return nil, &notWritten{err: err}
			}
			return nil, err
		}
	}
	return resp, nil
}

// errStalled is a request that moved no byte for the client's idle time.
var errStalled = errors.New("telegram: the request stalled")

// stallWatch cancels a request once it has moved no byte for the
// client's idle time. A move only notes its time; the watch, waking at
// the latest move's bound, looks again and waits out what is left.
type stallWatch struct {
	now  func() time.Time
	base time.Time    // the request's start (monotonic on the real clock)
	last atomic.Int64 // the latest move, as a time.Duration since base
	done chan struct{}
	once sync.Once
}

func (c *ctxClient) watch(cancel context.CancelCauseFunc) *stallWatch {
	now, after := c.now, c.after
	if now == nil {
		now = time.Now
	}
	if after == nil {
		after = time.After
	}
	w := &stallWatch{now: now, base: now(), done: make(chan struct{})}
	go func() {
		for {
			// The time first, then the latest move: a move noted between
			// the two only lengthens the wait, never cuts it short.
			elapsed := now().Sub(w.base)
			left := time.Duration(w.last.Load()) + c.idle - elapsed
			if left <= 0 {
				cancel(fmt.Errorf("%w for %v", errStalled, c.idle))
				return
			}
			select {
			case <-after(left):
			case <-w.done:
				return
			}
		}
	}()
	return w
}

// moved notes a move of the request: a byte of its body or its answer
// taken, or its body written whole.
func (w *stallWatch) moved() { w.last.Store(int64(w.now().Sub(w.base))) }

// stop ends the watch: the request is over.
func (w *stallWatch) stop() { w.once.Do(func() { close(w.done) }) }

// moving is a request's or an answer's body whose every read moves the
// request's stall watch; closing an answer's ends the request.
type moving struct {
	io.ReadCloser
	w   *stallWatch
	end func() // an answer's: stops the watch, frees the context
}

func (m *moving) Read(p []byte) (int, error) {
	n, err := m.ReadCloser.Read(p)
	if n > 0 {
		m.w.moved()
	}
	return n, err
}

func (m *moving) Close() error {
	err := m.ReadCloser.Close()
	if m.end != nil {
		m.end()
	}
	return err
}

// notWritten is the failure of a request the Bot API cannot have acted
// on: it was never written whole, or it was refused (a 4xx status) and
// the refusal's answer was not read whole.
type notWritten struct{ err error }

func (e *notWritten) Error() string { return e.err.Error() }
func (e *notWritten) Unwrap() error { return e.err }

func (c *ctxClient) setPoll(ctx context.Context) {
	c.mu.Lock()
	c.poll = ctx
	c.mu.Unlock()
}

// StopTaking stops taking updates: the webhook answers 503, and queued
// updates are left for Telegram to send again. Reset notices not yet sent
// are left too (their users are told when they next write).
func (b *Bot) StopTaking() {
	b.mu.Lock()
	if !b.draining {
		b.draining = true
		close(b.stopping)
	}
	b.mu.Unlock()
}

func (b *Bot) isDraining() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.draining
}

// Wait waits until queued updates are processed and their replies sent,
// and the reset notices stopped (Bot.sendNotices), or ctx ends.
func (b *Bot) Wait(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		b.inflight.Wait()
		if b.notices != nil {
			<-b.notices.done
		}
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
