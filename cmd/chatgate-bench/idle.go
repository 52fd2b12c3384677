package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/gateway"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

type memSample struct {
	RSSKiB  float64 `json:"rss_kib"`
	HeapKiB float64 `json:"heap_kib"`
	Conns   int     `json:"connections"`
}

// serveIdleChild runs the gateway's WebSocket stack alone in this process,
// prints its address, and answers GET /mem with its RSS and heap after a GC.
// The parent holds the connections, so the child's memory is the server's.
func serveIdleChild(ctx context.Context, stdout, stderr io.Writer) int {
	dir, err := os.MkdirTemp("", "chatgate-bench-idle")
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	db, err := store.Open(ctx, store.DriverSQLite, filepath.Join(dir, "idle.db"), store.OpenOptions{Logger: discard})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer db.Close()
	mgr := sessions.New(db, agent.Echo{}, sessions.Options{Logger: discard})
	ws := gateway.NewWebSocket(gateway.SessionsOf(mgr), gateway.WSOptions{RatePerSecond: 1e6, RateBurst: 1 << 20, Logger: discard})
	srv := gateway.New(discard)
	srv.Handle("GET /ws", ws)
	srv.Handle("GET /mem", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runtime.GC()
		debug.FreeOSMemory()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if path := os.Getenv("CHATGATE_BENCH_HEAP_PROFILE"); path != "" {
			if f, err := os.Create(path); err == nil {
				pprof.WriteHeapProfile(f)
				f.Close()
			}
		}
		json.NewEncoder(w).Encode(memSample{RSSKiB: rssKiB(), HeapKiB: float64(ms.HeapInuse+ms.StackInuse) / 1024, Conns: ws.Connections()})
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "ADDR %s\n", ln.Addr())
	go srv.Serve(ln)
	io.Copy(io.Discard, os.Stdin) // until the parent closes our stdin
	return 0
}

func rssKiB() float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return 0
}

// idleMemory starts the child, samples its memory, opens o.idleConns
// connections (each says hello and gets ready, as a real client does), and
// samples again.
func idleMemory(ctx context.Context, o options) (*idleResult, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, "-serve-idle")
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ADDR ") {
		return nil, fmt.Errorf("idle server did not start: %q %v", line, err)
	}
	addr := strings.TrimSpace(strings.TrimPrefix(line, "ADDR "))
	sample := func() (memSample, error) {
		var s memSample
		resp, err := http.Get("http://" + addr + "/mem")
		if err != nil {
			return s, err
		}
		defer resp.Body.Close()
		return s, json.NewDecoder(resp.Body).Decode(&s)
	}
	dial := func(i int) (*websocket.Conn, error) {
		c, _, err := websocket.DefaultDialer.DialContext(ctx, "ws://"+addr+"/ws", nil)
		if err != nil {
			return nil, err
		}
		c.WriteJSON(map[string]any{"type": "hello", "user": fmt.Sprint("idle-", i)})
		var ready map[string]any
		c.SetReadDeadline(time.Now().Add(60 * time.Second))
		if err := c.ReadJSON(&ready); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	// Warm up: the first connections pay for pools and caches.
	var warm []*websocket.Conn
	for i := 0; i < 20; i++ {
		c, err := dial(-1 - i)
		if err != nil {
			return nil, err
		}
		warm = append(warm, c)
	}
	before, err := sample()
	if err != nil {
		return nil, err
	}
	conns := make([]*websocket.Conn, o.idleConns)
	var wg sync.WaitGroup
	var firstErr error
	var mu sync.Mutex
	next := make(chan int)
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				c, err := dial(i)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				conns[i] = c
				mu.Unlock()
			}
		}()
	}
	for i := range conns {
		next <- i
	}
	close(next)
	wg.Wait()
	defer func() {
		for _, c := range append(conns, warm...) {
			if c != nil {
				c.Close()
			}
		}
	}()
	if firstErr != nil {
		return nil, fmt.Errorf("opening %d connections: %w", o.idleConns, firstErr)
	}
	after, err := sample()
	if err != nil {
		return nil, err
	}
	n := float64(after.Conns - before.Conns)
	if n <= 0 {
		return nil, fmt.Errorf("server reports %d connections", after.Conns)
	}
	return &idleResult{Connections: int(n), RSSPerConnKiB: (after.RSSKiB - before.RSSKiB) / n, HeapPerConnKB: (after.HeapKiB - before.HeapKiB) / n}, nil
}
