package main

// The load: WebSocket clients that send messages and time their answers,
// the bare echo server they are measured against, and the summaries of
// their latencies.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// drive runs n WebSocket clients against url, each sending burst
// messages at once (one, for a turn's round trip) and timing each round
// until its answer: for the gateway the reply frame to the round's last
// message (replies to earlier ones, if answered apart, are read past), for
// the echo server the echoed frame. A result's Turns counts rounds.
// Bounded by o.messages (per client) and o.duration.
func drive(ctx context.Context, url string, n int, o options, gatewayProtocol bool, burst int) loadResult {
	return runClients(ctx, n, o, func(ctx context.Context, i int, deadline time.Time, fail func()) []time.Duration {
		user := ""
		if gatewayProtocol {
			user = fmt.Sprintf("bench-%d-%s", i, shortID())
		}
		c, err := dialClient(ctx, url, user)
		if err != nil {
			fail()
			return nil
		}
		defer c.Close()
		mine := make([]time.Duration, 0, o.messages/burst+1)
		for m := 0; m < o.messages && time.Now().Before(deadline); m += burst {
			t0 := time.Now()
			if !sendRound(c, m, burst, gatewayProtocol, "hello gateway") {
				fail()
				return nil
			}
			mine = append(mine, time.Since(t0))
		}
		return mine
	})
}

// sendRound sends messages m to m+burst-1 (ids "m<n>", each saying text)
// and reads until their answer: the reply to the last of them (replies to
// earlier ones are read past) or, without the gateway's protocol, the
// first frame back. False when a write or read failed.
func sendRound(c *websocket.Conn, m, burst int, gatewayProtocol bool, text string) bool {
	last := ""
	for k := 0; k < burst; k++ {
		last = fmt.Sprint("m", m+k)
		if c.WriteJSON(map[string]any{"type": "message", "id": last, "text": text}) != nil {
			return false
		}
	}
	for {
		f, ok := readFrame(c)
		if !ok {
			return false
		}
		if !gatewayProtocol || (f["type"] == "reply" && f["reply_to"] == last) {
			return true
		}
	}
}

// runClients runs n clients at once and summarizes the latencies they
// time. Client i runs its rounds until deadline (o.duration from now; its
// context allows 10 s more for the round in flight), calls fail for each
// error, and returns its latencies: nil when it gave up, which drops the
// rounds it had timed.
func runClients(ctx context.Context, n int, o options, client func(ctx context.Context, i int, deadline time.Time, fail func()) []time.Duration) loadResult {
	ctx, cancel := context.WithTimeout(ctx, o.duration+10*time.Second)
	defer cancel()
	deadline := time.Now().Add(o.duration)
	var mu sync.Mutex
	var lat []time.Duration
	errors := 0
	fail := func() {
		mu.Lock()
		errors++
		mu.Unlock()
	}
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := client(ctx, i, deadline, fail)
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return summarize(n, lat, time.Since(start), errors)
}

// dialClient connects a WebSocket client to url and, when user is set,
// says hello as user and waits for ready, as a gateway client does.
func dialClient(ctx context.Context, url, user string) (*websocket.Conn, error) {
	dialer := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	c, _, err := dialer.DialContext(ctx, url, nil)
	if err != nil {
		return nil, err
	}
	if user != "" {
		c.WriteJSON(map[string]any{"type": "hello", "user": user})
		var ready map[string]any
		if err := c.ReadJSON(&ready); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// readFrame reads the client's next frame, waiting 30 s at the most; a
// read that fails or an error frame is not ok.
func readFrame(c *websocket.Conn) (map[string]any, bool) {
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var f map[string]any
	if c.ReadJSON(&f) != nil || f["type"] == "error" {
		return nil, false
	}
	return f, true
}

func summarize(clients int, lat []time.Duration, elapsed time.Duration, errors int) loadResult {
	r := loadResult{Clients: clients, Turns: len(lat), ErrorCount: errors}
	if len(lat) == 0 {
		return r
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	r.PerSecond = float64(len(lat)) / elapsed.Seconds()
	r.P50Millis, r.P99Millis = pct(0.50), pct(0.99)
	return r
}

func shortID() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// echoServer is baseline A: gorilla/websocket echoing every frame, nothing
// else.
func echoServer() (string, func()) {
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			mt, data, err := c.ReadMessage()
			if err != nil {
				return
			}
			if c.WriteMessage(mt, data) != nil {
				return
			}
		}
	})}
	go srv.Serve(ln)
	return "ws://" + ln.Addr().String() + "/", func() { srv.Close() }
}
