package telegram

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/clocktest"
)

// A request to the Bot API is bounded by its progress: one whose bytes
// keep moving takes as long as they take, longer than the bound many
// times over; one that stalls fails after the bound — before its body
// was written whole (the Bot API cannot have acted on it: notWritten),
// or waiting for its answer, or in the middle of its answer. The watch
// runs on a fake clock: the test moves it between the bytes.
func TestRequestsAreBoundedByTheirProgress(t *testing.T) {
	const idle = time.Minute
	clock := clocktest.New(time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC))
	held := make(chan struct{})
	next := make(chan struct{}, 16) // the reader of a trickle asks for its next bytes
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stall" {
			<-held // reads nothing: the client's writes fill the connection and stop
			return
		}
		got, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		switch r.URL.Path {
		case "/refused-cut", "/failed-cut":
			// An error status whose answer is cut off part way.
			status := "400 Bad Request"
			if r.URL.Path == "/failed-cut" {
				status = "502 Bad Gateway"
			}
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			fmt.Fprintf(buf, "HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"ok\":false,", status)
			buf.Flush()
			conn.Close()
		case "/upload":
			w.Write(got) // the body, as taken
		case "/hold":
			<-held
		case "/trickle", "/trickle-stop":
			// The answer's bytes, two at a time, each when the reader has
			// the ones before; /trickle-stop stops half way and holds the
			// rest.
			for i := range 8 {
				if i > 0 {
					select {
					case <-next:
					case <-held:
						return
					}
				}
				if i == 4 && r.URL.Path == "/trickle-stop" {
					<-held
					return
				}
				w.Write([]byte("ab"))
				w.(http.Flusher).Flush()
			}
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(held) }) // (before the server closes: cleanups run last first)
	c := &ctxClient{client: &http.Client{}, idle: idle, poll: context.Background(), now: clock.Now, after: clock.After}
	// wrote is told when a request's body has gone out whole: the
	// client's own note of it is made first (its trace hooks run first).
	wrote := make(chan struct{}, 1)
	post := func(path string, body io.Reader) (*http.Response, error) {
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			WroteRequest: func(i httptrace.WroteRequestInfo) {
				if i.Err == nil {
					wrote <- struct{}{}
				}
			},
		})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+path, body)
		if err != nil {
			t.Fatal(err)
		}
		return c.Do(req)
	}
	// stallOut moves the clock a bound at a time, each time the watch
	// has looked at it again, until done is closed.
	stallOut := func(done <-chan struct{}) {
		for range 1000 {
			_, newer := clock.Made()
			select {
			case <-done:
				return
			default:
			}
			clock.Advance(idle)
			select {
			case <-done:
				return
			case <-newer:
			case <-time.After(time.Minute): // a hang guard, in real time
				t.Fatal("a request that moved nothing for a bound neither ended nor waited again")
			}
		}
		t.Fatal("a request that moved nothing for a thousand bounds did not end")
	}
	type result struct {
		resp *http.Response
		err  error
	}
	postStalling := func(path string, body io.Reader, before func()) result {
		var r result
		done := make(chan struct{})
		go func() {
			defer close(done)
			r.resp, r.err = post(path, body)
		}()
		if before != nil {
			before()
		}
		stallOut(done)
		return r
	}

	// An upload that moves a chunk every half of the bound, for six
	// bounds and more.
	payload := bytes.Repeat([]byte("0123456789abcdef"), 13)
	resp, err := post("/upload", &paced{data: payload, chunk: 16, step: func() { clock.Advance(idle / 2) }})
	if err != nil {
		t.Fatalf("a slow upload that kept moving failed: %v", err)
	}
	<-wrote
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("the server took %d bytes (%v), want %d", len(got), err, len(payload))
	}

	// An upload the other end stops taking, half way: never written
	// whole. (32 MiB: more than the connection holds in flight.)
	r := postStalling("/stall", bytes.NewReader(make([]byte, 32<<20)), nil)
	var nw *notWritten
	if !errors.As(r.err, &nw) || !errors.Is(r.err, errStalled) {
		t.Fatalf("a stalled upload: %v, want it not written, stalled", r.err)
	}

	// A request written whole whose answer never comes: it may have been
	// acted on, so it is not taken for unwritten.
	r = postStalling("/hold", bytes.NewReader([]byte("chat_id=7")), func() { <-wrote })
	if errors.As(r.err, &nw) || !errors.Is(r.err, errStalled) {
		t.Fatalf("an answer that never came: %v, want a stall after the request was written", r.err)
	}

	// A refusal (4xx) whose answer is cut off was still a refusal: not
	// acted on. A server's failure (5xx) cut off may have been anything.
	if _, err := post("/refused-cut", bytes.NewReader([]byte("chat_id=7"))); !errors.As(err, &nw) {
		t.Fatalf("a 400 cut off: %v, want it taken as not acted on", err)
	}
	<-wrote
	if _, err := post("/failed-cut", bytes.NewReader([]byte("chat_id=7"))); err == nil || errors.As(err, &nw) {
		t.Fatalf("a 502 cut off: %v, want a failure that may have been acted on", err)
	}
	<-wrote

	// readChunks reads an answer until it has want bytes, moving the
	// clock half a bound after each read and asking for more.
	readChunks := func(body io.Reader, want int) string {
		var got []byte
		buf := make([]byte, 64)
		for len(got) < want {
			n, err := body.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil && (err != io.EOF || len(got) < want) {
				t.Fatalf("after %q: %v", got, err)
			}
			if n > 0 && len(got)%2 == 0 {
				clock.Advance(idle / 2)
				next <- struct{}{}
			}
		}
		return string(got)
	}

	// An answer that trickles in for four bounds is read whole; one that
	// stops half way fails in its reading.
	resp, err = post("/trickle", bytes.NewReader(nil))
	if err != nil {
		t.Fatal(err)
	}
	<-wrote
	if got := readChunks(resp.Body, 16); got != "abababababababab" {
		t.Fatalf("a trickling answer: %q", got)
	}
	if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
		t.Fatalf("after a trickling answer: %q, %v", rest, err)
	}
	resp.Body.Close()
	resp, err = post("/trickle-stop", bytes.NewReader(nil))
	if err != nil {
		t.Fatal(err)
	}
	<-wrote
	first := readChunks(resp.Body, 8)
	var rest []byte
	done := make(chan struct{})
	go func() {
		defer close(done)
		rest, err = io.ReadAll(resp.Body)
	}()
	stallOut(done)
	resp.Body.Close()
	if first != "abababab" || len(rest) != 0 || !errors.Is(err, errStalled) {
		t.Fatalf("an answer that stopped half way: %q then %q, %v; want its first half and a stall", first, rest, err)
	}
}

// The default client puts no bound on a request's whole time; the bound
// on a stall follows the long poll's.
func TestDefaultRequestBoundFollowsThePoll(t *testing.T) {
	o := Options{PollTimeout: 50 * time.Second}.withDefaults()
	if o.HTTPClient.Timeout != 0 || o.RequestIdle != 80*time.Second {
		t.Fatalf("client timeout %v, stall bound %v; want none and 80s", o.HTTPClient.Timeout, o.RequestIdle)
	}
}

// paced reads data chunk bytes at a time, calling step before each chunk
// after the first.
type paced struct {
	data  []byte
	chunk int
	step  func()
	off   int
}

func (p *paced) Read(b []byte) (int, error) {
	if p.off >= len(p.data) {
		return 0, io.EOF
	}
	if p.off > 0 {
		p.step()
	}
	n := copy(b, p.data[p.off:min(p.off+p.chunk, len(p.data))])
	p.off += n
	return n, nil
}
