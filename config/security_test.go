package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestNonLoopbackListenNeedsTokensOrAllowAnonymous(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:8765", ":8765", "192.168.1.5:8765", "[::]:8765"} {
		_, err := Parse([]byte("gateway:\n  listen: \""+listen+"\"\n"), "bot.yaml", env(nil))
		var errs Errors
		if !errors.As(err, &errs) || len(errs) != 1 || !strings.Contains(errs[0].Error(), "bot.yaml:2: gateway.listen:") ||
			!strings.Contains(errs[0].Msg, "allow_anonymous") {
			t.Fatalf("listen %s without tokens: %v", listen, err)
		}
	}
	for _, listen := range []string{"127.0.0.1:8765", "127.3.4.5:1", "[::1]:8765", "localhost:8765"} {
		mustParse(t, "gateway:\n  listen: \""+listen+"\"\n")
	}
	c := mustParse(t, "gateway:\n  listen: 0.0.0.0:8765\nchannels:\n  websocket:\n    allow_anonymous: true\n")
	if !c.AnonymousWebSocket() {
		t.Fatal("allow_anonymous without tokens is not anonymous mode")
	}
	mustParse(t, "gateway:\n  listen: 0.0.0.0:8765\nchannels:\n  websocket:\n    auth_tokens: {alice: aaaaaaaaaaaaaaaaaaaa}\n")
	mustParse(t, "gateway:\n  listen: 0.0.0.0:8765\nchannels:\n  websocket:\n    enabled: false\n")
}

func TestSecurityDefaultsAndSizes(t *testing.T) {
	c := mustParse(t, "")
	if c.Channels.WebSocket.ResumeTTL.D() != 30*24*time.Hour || c.Session.CacheBytes != 64<<20 ||
		c.Channels.Telegram.RateLimit.PerSecond != 1 || c.Channels.Telegram.RateLimit.Burst != 10 {
		t.Fatalf("defaults: ttl %v cache %d telegram %+v", c.Channels.WebSocket.ResumeTTL.D(), c.Session.CacheBytes, c.Channels.Telegram.RateLimit)
	}
	c = mustParse(t, "session:\n  cache_bytes: 2MiB\n")
	if c.Session.CacheBytes != 2<<20 {
		t.Fatalf("2MiB = %d", c.Session.CacheBytes)
	}
	_, err := Parse([]byte("session:\n  cache_bytes: lots\nmetrics:\n  token: short\nchannels:\n  telegram:\n    rate_limit: {global_per_second: 5}\n    session:\n      cache_bytes: 1MiB\n"), "bot.yaml", env(nil))
	if err == nil || !strings.Contains(err.Error(), "bot.yaml:2: session.cache_bytes") {
		t.Fatalf("bad size: %v", err)
	}
	_, err = Parse([]byte("metrics:\n  token: short\nchannels:\n  telegram:\n    rate_limit: {global_per_second: 5}\n    session:\n      cache_bytes: 1MiB\n"), "bot.yaml", env(nil))
	for _, want := range []string{"bot.yaml:2: metrics.token", "channels.telegram.rate_limit.global_burst", "bot.yaml:7: channels.telegram.session.cache_bytes"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("want %q in:\n%v", want, err)
		}
	}
}

func TestDescribeSecurity(t *testing.T) {
	c := mustParse(t, "gateway:\n  listen: 0.0.0.0:8765\nchannels:\n  websocket:\n    allow_anonymous: true\n    rate_limit: {global_per_second: 100, global_burst: 200}\nmetrics:\n  token: aaaaaaaaaaaaaaaaaaaa\nstorage:\n  retention_days: 30\n")
	var b strings.Builder
	c.Describe(&b)
	for _, want := range []string{
		"websocket.auth        allow_anonymous: generated guest principals only",
		"websocket.resume_ttl  720h0m0s",
		"websocket.rate_limit  5/s burst 10 per principal; channel 100/s burst 200",
		"metrics               bearer token",
		"session.cache_bytes   67108864",
		"storage.retention_days  30 days",
	} {
		if !strings.Contains(strings.Join(strings.Fields(b.String()), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("check output lacks %q:\n%s", want, b.String())
		}
	}
}

func TestOpenMetricsWarns(t *testing.T) {
	c := mustParse(t, "gateway:\n  listen: 0.0.0.0:8765\nchannels:\n  websocket:\n    allow_anonymous: true\n")
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "bot.yaml:2: gateway.listen: /metrics is served") {
		t.Fatalf("warnings = %q", c.Warnings)
	}
	c = mustParse(t, "metrics:\n  listen: 0.0.0.0:9102\n")
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "metrics.token is not set") {
		t.Fatalf("warnings = %q", c.Warnings)
	}
	for _, ok := range []string{"", "metrics:\n  listen: 127.0.0.1:9102\n", "gateway:\n  listen: 0.0.0.0:8765\nchannels:\n  websocket:\n    allow_anonymous: true\nmetrics:\n  token: aaaaaaaaaaaaaaaaaaaa\n"} {
		if c := mustParse(t, ok); len(c.Warnings) != 0 {
			t.Fatalf("%q warns: %q", ok, c.Warnings)
		}
	}
}
