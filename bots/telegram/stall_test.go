package telegram

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A request to the Bot API is bounded by its progress: one whose bytes
// keep moving takes as long as they take, longer than the bound many
// times over; one that stalls fails after the bound — before its body
// was written whole (the Bot API cannot have acted on it: notWritten),
// or waiting for its answer, or in the middle of its answer.
func TestRequestsAreBoundedByTheirProgress(t *testing.T) {
	const idle = 400 * time.Millisecond
	answerHeld := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stall" {
			<-answerHeld // reads nothing: the client's writes fill the connection and stop
			return
		}
		got, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		switch r.URL.Path {
		case "/upload":
			w.Write(got) // the body, as taken
		case "/hold":
			<-answerHeld
		case "/trickle", "/trickle-stop":
			// The answer's bytes, a few at a time, a quarter of the bound
			// apart; /trickle-stop stops half way and holds the rest.
			for i := range 8 {
				if i == 4 && r.URL.Path == "/trickle-stop" {
					<-answerHeld
				}
				w.Write([]byte("ab"))
				w.(http.Flusher).Flush()
				time.Sleep(idle / 4)
			}
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(answerHeld) }) // (before the server closes: cleanups run last first)
	c := &ctxClient{client: &http.Client{}, idle: idle, poll: context.Background()}
	post := func(path string, body io.Reader) (*http.Response, error) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, body)
		if err != nil {
			t.Fatal(err)
		}
		return c.Do(req)
	}

	// An upload that moves a chunk every quarter of the bound, for three
	// bounds and more.
	payload := bytes.Repeat([]byte("0123456789abcdef"), 13)
	resp, err := post("/upload", &paced{data: payload, chunk: 16, gap: idle / 4})
	if err != nil {
		t.Fatalf("a slow upload that kept moving failed: %v", err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("the server took %d bytes (%v), want %d", len(got), err, len(payload))
	}

	// An upload the other end stops taking, half way: never written
	// whole. (32 MiB: more than the connection holds in flight.)
	_, err = post("/stall", bytes.NewReader(make([]byte, 32<<20)))
	var nw *notWritten
	if !errors.As(err, &nw) || !errors.Is(err, errStalled) {
		t.Fatalf("a stalled upload: %v, want it not written, stalled", err)
	}

	// A request written whole whose answer never comes: it may have been
	// acted on, so it is not taken for unwritten.
	_, err = post("/hold", bytes.NewReader([]byte("chat_id=7")))
	if errors.As(err, &nw) || !errors.Is(err, errStalled) {
		t.Fatalf("an answer that never came: %v, want a stall after the request was written", err)
	}

	// An answer that trickles in for twice the bound is read whole; one
	// that stops half way fails in its reading.
	resp, err = post("/trickle", bytes.NewReader(nil))
	if err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(got) != "abababababababab" {
		t.Fatalf("a trickling answer: %q, %v", got, err)
	}
	resp, err = post("/trickle-stop", bytes.NewReader(nil))
	if err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || string(got) != "abababab" {
		t.Fatalf("an answer that stopped half way: %q, %v; want its first half and a failure", got, err)
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

// paced reads data chunk bytes at a time, gap apart.
type paced struct {
	data  []byte
	chunk int
	gap   time.Duration
	off   int
}

func (p *paced) Read(b []byte) (int, error) {
	if p.off >= len(p.data) {
		return 0, io.EOF
	}
	if p.off > 0 {
		time.Sleep(p.gap)
	}
	n := copy(b, p.data[p.off:min(p.off+p.chunk, len(p.data))])
	p.off += n
	return n, nil
}
