package pgtest

import (
	"context"
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
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/rs/zerolog"
)

// Proxy is toxiproxy, run in this process, between a gateway or a store
// and the PostgreSQL server of the test's DSN: Cut makes the database
// unreachable the way a restarting server does (new connections refused,
// the open ones closed under the client), Stall the way a frozen server
// or a network dropping everything does (nothing closed, nothing
// answered), Heal brings it back on the same address, and Latency slows
// every byte.
type Proxy struct {
	// DSN is the test's DSN with its host replaced by the proxy's.
	DSN string

	mu    sync.Mutex
	proxy *toxiproxy.Proxy
	addr  string
	cut   bool
	stall bool
}

// StartProxy puts a proxy in front of the PostgreSQL server of dsn
// (a URL-form DSN, as DSN returns) and stops it when the test ends.
func StartProxy(t *testing.T, dsn string) *Proxy {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		t.Skipf("the proxy needs a URL-form DSN in %s (postgres://user@127.0.0.1:5432/db?sslmode=disable)", EnvVar)
	}
	upstream := u.Host
	if u.Port() == "" {
		upstream = net.JoinHostPort(u.Hostname(), "5432")
	}
	if ip := net.ParseIP(u.Hostname()); u.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
		t.Skipf("the proxy runs on loopback only, and %s names %s", EnvVar, u.Hostname())
	}
	logger := zerolog.Nop()
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), logger)
	proxy := toxiproxy.NewProxy(server, "postgres", "127.0.0.1:0", upstream)
	if err := server.Collection.Add(proxy, true); err != nil {
		t.Fatalf("start toxiproxy: %v", err)
	}
	p := &Proxy{proxy: proxy, addr: proxy.Listen}
	u.Host = p.addr
	p.DSN = u.String()
	t.Cleanup(proxy.Stop)
	return p
}

// Cut refuses new connections and closes every open one, until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return
	}
	p.cut = true
	p.proxy.Stop() // closes the listener and every link
}

// stallToxics drop everything each way.
var stallToxics = []string{"stall-up:upstream", "stall-down:downstream"}

// blackhole is a toxic that drops every byte and, unlike toxiproxy's
// timeout toxic (whose removal closes the connection), leaves the
// connection as it was when removed: a request or answer dropped while it
// was in place is lost, and whoever waits for it waits until a deadline
// of its own, as across a network that lost it.
type blackhole struct{}

func (*blackhole) Pipe(stub *toxics.ToxicStub) {
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
		}
	}
}

func init() { toxics.Register("chatgate_blackhole", new(blackhole)) }

// Stall drops every byte either way, until Heal, and closes nothing: the
// open connections stay open and unanswered, new ones are accepted and
// never greeted, as with a frozen server or a network that drops what it
// carries (a request already on its way may run; its answer is lost).
func (p *Proxy) Stall(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stall {
		return
	}
	p.stall = true
	for _, ts := range stallToxics {
		name, stream, _ := strings.Cut(ts, ":")
		spec := fmt.Sprintf(`{"name":%q,"type":"chatgate_blackhole","stream":%q}`, name, stream)
		if _, err := p.proxy.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
			t.Fatalf("blackhole toxic: %v", err)
		}
	}
}

// Heal ends a cut or a stall. After a cut the proxy listens again on the
// same address: the port was the proxy's a moment ago, and another socket
// taking it meanwhile is retried for a while. After a stall the bytes
// flow again; what was dropped stays lost.
func (p *Proxy) Heal(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stall {
		for _, ts := range stallToxics {
			name, _, _ := strings.Cut(ts, ":")
			if err := p.proxy.Toxics.RemoveToxic(context.Background(), name); err != nil {
				t.Fatalf("remove the blackhole toxic: %v", err)
			}
		}
		p.stall = false
	}
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
func (p *Proxy) Latency(t testing.TB, d time.Duration) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	const name = "latency"
	if p.proxy.Toxics.GetToxic(name) != nil {
		if err := p.proxy.Toxics.RemoveToxic(context.Background(), name); err != nil {
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
