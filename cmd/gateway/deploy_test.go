package main

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chatgate/chatgate/config"
)

// The files that ship the gateway as an image — Containerfile and
// deploy/bot.yaml (the image's configuration) — name the same port, paths
// and variables; these tests fail when one of them changes alone.

func repoFile(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// fakeEnv is a LookupEnv of the given variables only.
func fakeEnv(vars map[string]string) config.LookupEnv {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

// containerfileLine returns the arguments of the final stage's
// instruction (after FROM scratch), or "" when it has none.
func containerfileLine(t *testing.T, instruction string) string {
	t.Helper()
	text := repoFile(t, "Containerfile")
	_, final, ok := strings.Cut(text, "\nFROM scratch\n")
	if !ok {
		t.Fatal("Containerfile: no final stage FROM scratch")
	}
	m := regexp.MustCompile(`(?m)^`+instruction+` (.*)$`).FindAllStringSubmatch(final, -1)
	if len(m) == 0 {
		return ""
	}
	return m[len(m)-1][1]
}

func TestImageConfiguration(t *testing.T) {
	const token = "sample-chatgate-token-0123456789"
	path := filepath.Join("..", "..", "deploy", "bot.yaml")

	// The image never serves an open WebSocket channel: without a token
	// it refuses to start, naming the variable.
	if _, err := config.Load(path, fakeEnv(nil)); err == nil || !strings.Contains(err.Error(), "CHATGATE_TOKEN is not set") {
		t.Fatalf("deploy/bot.yaml without CHATGATE_TOKEN: err = %v, want one naming CHATGATE_TOKEN", err)
	}

	cfg, err := config.Load(path, fakeEnv(map[string]string{"CHATGATE_TOKEN": token}))
	if err != nil {
		t.Fatalf("deploy/bot.yaml with CHATGATE_TOKEN: %v", err)
	}
	if cfg.Channels.WebSocket.AuthTokens["operator"] != token || cfg.TelegramEnabled() || cfg.Agent.Backend != "echo" {
		t.Errorf("deploy/bot.yaml: tokens %v, telegram %v, agent %s; want operator's token, no Telegram, echo",
			cfg.Channels.WebSocket.AuthTokens, cfg.TelegramEnabled(), cfg.Agent.Backend)
	}
	// A published port reaches only a listener on every interface.
	host, port, err := net.SplitHostPort(cfg.Gateway.Listen)
	if err != nil || host != "0.0.0.0" {
		t.Errorf("deploy/bot.yaml: gateway.listen = %q, want 0.0.0.0:PORT", cfg.Gateway.Listen)
	}
	if got := containerfileLine(t, "EXPOSE"); got != port {
		t.Errorf("Containerfile: EXPOSE %s, but deploy/bot.yaml listens on port %s", got, port)
	}
	// The database, and the pid file beside it, are in the volume, which
	// is the working directory (relative paths of a mounted bot.yaml).
	volume := containerfileLine(t, "VOLUME")
	if cfg.Storage.Driver != "sqlite" || filepath.Dir(cfg.Storage.DSN) != volume || filepath.Dir(cfg.Gateway.PidFile) != volume {
		t.Errorf("deploy/bot.yaml: storage %s %s, pid file %s; want SQLite and the pid file in the volume %s",
			cfg.Storage.Driver, cfg.Storage.DSN, cfg.Gateway.PidFile, volume)
	}
	if got := containerfileLine(t, "WORKDIR"); got != volume {
		t.Errorf("Containerfile: WORKDIR %s, want the volume %s", got, volume)
	}
	// The image runs the file it carries.
	copyTo := regexp.MustCompile(`(?m)^COPY deploy/bot\.yaml (\S+)$`).FindStringSubmatch(repoFile(t, "Containerfile"))
	if copyTo == nil || containerfileLine(t, "CMD") != `["serve", "-c", "`+copyTo[1]+`"]` {
		t.Errorf("Containerfile: CMD %s does not serve the copied deploy/bot.yaml (%v)", containerfileLine(t, "CMD"), copyTo)
	}
	if got := containerfileLine(t, "USER"); got != "65532:65532" {
		t.Errorf("Containerfile: USER %q, want the numeric 65532:65532", got)
	}

	// agent openai is configured by the environment alone.
	cfg, err = config.Load(path, fakeEnv(map[string]string{
		"CHATGATE_TOKEN": token, "CHATGATE_AGENT": "openai", "OPENAI_API_KEY": "sk-sample", "OPENAI_MODEL": "gpt-4o-mini",
		"TELEGRAM_TOKEN": "123:abc", "CHATGATE_METRICS_TOKEN": "sample-metrics-token-0123",
	}))
	if err != nil {
		t.Fatalf("deploy/bot.yaml with agent openai: %v", err)
	}
	if cfg.Agent.Backend != "openai" || cfg.Agent.OpenAI.Model != "gpt-4o-mini" || !cfg.TelegramEnabled() || cfg.Metrics.Token == "" {
		t.Errorf("deploy/bot.yaml: agent %s model %q, telegram %v, metrics token %q", cfg.Agent.Backend, cfg.Agent.OpenAI.Model, cfg.TelegramEnabled(), cfg.Metrics.Token)
	}
}
