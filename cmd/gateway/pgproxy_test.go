package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/chatgate/chatgate/internal/pgtest"
)

// pgProxy is toxiproxy, run in this process, between a gateway and the
// PostgreSQL server of the test's DSN: cut makes the database unreachable
// the way a network partition or a restarting server does (new
// connections refused, the open ones closed under the client), heal
// brings it back on the same address, and latency slows every byte.
type pgProxy struct {
	// DSN is the test's DSN with its host replaced by the proxy's.
	DSN string

	mu    sync.Mutex
	proxy *toxiproxy.Proxy
	addr  string
	cut   bool
	cuts  int
}

// startPGProxy puts a proxy in front of the PostgreSQL server of dsn
// (a URL-form DSN, as pgtest.DSN returns) and stops it when the test ends.
func startPGProxy(t *testing.T, dsn string) *pgProxy {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		t.Skipf("the proxy needs a URL-form DSN in %s (postgres://user@127.0.0.1:5432/db?sslmode=disable)", pgtest.EnvVar)
	}
	upstream := u.Host
	if u.Port() == "" {
		upstream = net.JoinHostPort(u.Hostname(), "5432")
	}
	if ip := net.ParseIP(u.Hostname()); u.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
		t.Skipf("the proxy runs on loopback only, and %s names %s", pgtest.EnvVar, u.Hostname())
	}
	logger := zerolog.Nop()
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), logger)
	proxy := toxiproxy.NewProxy(server, "postgres", "127.0.0.1:0", upstream)
	if err := server.Collection.Add(proxy, true); err != nil {
		t.Fatalf("start toxiproxy: %v", err)
	}
	p := &pgProxy{proxy: proxy, addr: proxy.Listen}
	u.Host = p.addr
	p.DSN = u.String()
	t.Cleanup(proxy.Stop)
	return p
}

// Cut refuses new connections and closes every open one, until Heal.
func (p *pgProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return
	}
	p.cut = true
	p.cuts++
	p.proxy.Stop() // closes the listener and every link
}

// Heal listens again on the same address. The port was the proxy's a
// moment ago; another socket taking it meanwhile is retried for a while.
func (p *pgProxy) Heal(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cut {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := p.proxy.Start()
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			t.Fatalf("toxiproxy listening again on %s: %v", p.addr, err)
		}
		time.Sleep(50 * time.Millisecond) // the port is busy: nothing to wait on but time
	}
	p.cut = false
}

// Latency delays every piece of data towards PostgreSQL by d (0 removes
// the delay).
func (p *pgProxy) Latency(t *testing.T, d time.Duration) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	const name = "latency"
	if p.proxy.Toxics.GetToxic(name) != nil {
		if err := p.proxy.Toxics.RemoveToxic(t.Context(), name); err != nil {
			t.Fatal(err)
		}
	}
	if d <= 0 {
		return
	}
	spec := fmt.Sprintf(`{"name":%q,"type":"latency","stream":"upstream","attributes":{"latency":%d}}`, name, d.Milliseconds())
	if _, err := p.proxy.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
		t.Fatalf("latency toxic: %v", err)
	}
}
