// Command chatgate-load drives a running gateway over its WebSocket API
// as chat users would: each user connects, says hello, then sends a
// message and waits for its reply before sending the next. It reports
// the replies a second and their latency.
//
// It is the bench's independent check: a separate process with a client
// of its own, against a gateway started as an operator starts one
// (docs/performance.md, "An independent load client"):
//
//	go run ./cmd/gateway -c bot.yaml &
//	go run ./cmd/chatgate-load -url ws://127.0.0.1:8765/ws -users 50 -duration 20s
//
// Load goes only where -url points; every user stops at -duration, and
// a reply that does not come within -timeout counts as an error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "chatgate-load:", err)
		os.Exit(1)
	}
}

type options struct {
	url      string
	users    int
	duration time.Duration
	warmup   time.Duration
	timeout  time.Duration
	token    string
	prefix   string
	jsonOut  string
}

// result is what a run measured, after its warm-up.
type result struct {
	URL       string  `json:"url"`
	Users     int     `json:"users"`
	Seconds   float64 `json:"seconds"`
	Replies   int     `json:"replies"`
	PerSecond float64 `json:"replies_per_second"`
	P50Millis float64 `json:"p50_ms"`
	P90Millis float64 `json:"p90_ms"`
	P99Millis float64 `json:"p99_ms"`
	MaxMillis float64 `json:"max_ms"`
	Errors    int     `json:"errors"`
	// FirstError is the first error a user met, if any.
	FirstError string `json:"first_error,omitempty"`
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("chatgate-load", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.url, "url", "ws://127.0.0.1:8765/ws", "the gateway's WebSocket URL (a loopback address)")
	fs.IntVar(&o.users, "users", 50, "users at once, each waiting for its reply before its next message")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "how long the users send, warm-up included")
	fs.DurationVar(&o.warmup, "warmup", 3*time.Second, "replies in this first part of the run are not counted")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long a user waits for a reply before counting an error")
	fs.StringVar(&o.token, "token", "", "an auth token (channels.websocket.auth_tokens), sent as Authorization: Bearer")
	fs.StringVar(&o.prefix, "user-prefix", "load", "the users' names are this, a run id and a number")
	fs.StringVar(&o.jsonOut, "json", "", "also write the result as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.users <= 0 || o.duration <= o.warmup {
		return errors.New("-users must be positive and -duration longer than -warmup")
	}
	u, err := url.Parse(o.url)
	if err != nil {
		return fmt.Errorf("-url: %w", err)
	}
	if u.Scheme != "ws" && u.Scheme != "wss" {
		return fmt.Errorf("-url: want ws:// or wss://, got %q", o.url)
	}
	r := load(context.Background(), o)
	fmt.Fprintf(out, "%d users against %s for %.1f s (after %s of warm-up): %d replies, %.0f a second; latency p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms; %d errors\n",
		r.Users, r.URL, r.Seconds, o.warmup, r.Replies, r.PerSecond, r.P50Millis, r.P90Millis, r.P99Millis, r.MaxMillis, r.Errors)
	if r.FirstError != "" {
		fmt.Fprintln(out, "first error:", r.FirstError)
	}
	if o.jsonOut != "" {
		data, _ := json.MarshalIndent(r, "", "  ")
		if err := os.WriteFile(o.jsonOut, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	if r.Replies == 0 {
		return errors.New("no reply came")
	}
	return nil
}

// load runs o.users users until o.duration has passed and summarizes
// the replies timed after o.warmup.
func load(ctx context.Context, o options) result {
	runID := time.Now().Format("150405")
	start := time.Now()
	counted, end := start.Add(o.warmup), start.Add(o.duration)
	var (
		mu       sync.Mutex
		lat      []time.Duration
		errCount int
		firstErr string
		wg       sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errCount++
		if firstErr == "" {
			firstErr = err.Error()
		}
	}
	for i := range o.users {
		wg.Go(func() {
			mine, err := user(ctx, o, fmt.Sprintf("%s-%s-%d", o.prefix, runID, i), counted, end)
			if err != nil {
				fail(err)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(counted)
	r := result{URL: o.url, Users: o.users, Seconds: elapsed.Seconds(), Replies: len(lat), Errors: errCount, FirstError: firstErr}
	if len(lat) == 0 {
		return r
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	r.PerSecond = float64(len(lat)) / elapsed.Seconds()
	r.P50Millis, r.P90Millis, r.P99Millis = pct(0.50), pct(0.90), pct(0.99)
	r.MaxMillis = float64(lat[len(lat)-1].Microseconds()) / 1000
	return r
}

// frame is what this client reads of the gateway's frames.
type frame struct {
	Type    string `json:"type"`
	ReplyTo string `json:"reply_to"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// user connects as name and sends a message, waits for its reply, and
// again, until end; it returns the latencies of the replies to messages
// sent after counted.
func user(ctx context.Context, o options, name string, counted, end time.Time) ([]time.Duration, error) {
	var header = map[string][]string{}
	if o.token != "" {
		header["Authorization"] = []string{"Bearer " + o.token}
	}
	dialer := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	c, _, err := dialer.DialContext(ctx, o.url, header)
	if err != nil {
		return nil, fmt.Errorf("%s: dial: %w", name, err)
	}
	defer c.Close()
	if err := c.WriteJSON(map[string]string{"type": "hello", "user": name}); err != nil {
		return nil, fmt.Errorf("%s: hello: %w", name, err)
	}
	if f, err := read(c, o.timeout); err != nil {
		return nil, fmt.Errorf("%s: waiting for ready: %w", name, err)
	} else if f.Type != "ready" {
		return nil, fmt.Errorf("%s: the first frame is %q, want ready", name, f.Type)
	}
	var lat []time.Duration
	for n := 0; time.Now().Before(end); n++ {
		id := fmt.Sprintf("m%d", n)
		t0 := time.Now()
		if err := c.WriteJSON(map[string]string{"type": "message", "id": id, "text": fmt.Sprintf("message %d from %s", n, name)}); err != nil {
			return lat, fmt.Errorf("%s: send %s: %w", name, id, err)
		}
		for {
			f, err := read(c, o.timeout)
			if err != nil {
				return lat, fmt.Errorf("%s: waiting for the reply to %s: %w", name, id, err)
			}
			if f.Type == "error" {
				return lat, fmt.Errorf("%s: error frame for %s: %s: %s", name, id, f.Code, f.Message)
			}
			if f.Type == "reply" && f.ReplyTo == id {
				break
			}
		}
		if !t0.Before(counted) {
			lat = append(lat, time.Since(t0))
		}
	}
	return lat, nil
}

func read(c *websocket.Conn, timeout time.Duration) (frame, error) {
	c.SetReadDeadline(time.Now().Add(timeout))
	var f frame
	err := c.ReadJSON(&f)
	return f, err
}
