package main

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/chatgate/chatgate/config"
)

// The files that ship the gateway as an image — Containerfile,
// deploy/bot.yaml (the image's configuration), deploy/replica.yaml and
// compose.yaml — name the same port, paths and variables; these tests
// fail when one of them changes alone.

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

func TestReplicaConfiguration(t *testing.T) {
	path := filepath.Join("..", "..", "deploy", "replica.yaml")
	env := map[string]string{"CHATGATE_TOKEN": "sample-chatgate-token-0123456789"}
	cfg, err := config.Load(path, fakeEnv(env))
	if err != nil {
		t.Fatalf("deploy/replica.yaml: %v", err)
	}
	if cfg.Storage.Driver != "postgres" || !strings.HasPrefix(cfg.Gateway.Listen, "0.0.0.0:") || !strings.HasPrefix(cfg.Gateway.PidFile, "/tmp/") {
		t.Errorf("deploy/replica.yaml: storage %s, listen %s, pid file %s; want postgres, every interface, /tmp",
			cfg.Storage.Driver, cfg.Gateway.Listen, cfg.Gateway.PidFile)
	}
	// Telegram without the domain its webhook needs is refused, naming
	// the URL; with it, the webhook is the proxy's public URL.
	env["TELEGRAM_TOKEN"], env["TELEGRAM_WEBHOOK_SECRET"] = "123:abc", "sample-secret"
	if _, err := config.Load(path, fakeEnv(env)); err == nil || !strings.Contains(err.Error(), "channels.telegram.webhook.url") {
		t.Errorf("deploy/replica.yaml with Telegram and no CHATGATE_DOMAIN: err = %v, want one naming webhook.url", err)
	}
	env["CHATGATE_DOMAIN"] = "chat.example.com"
	cfg, err = config.Load(path, fakeEnv(env))
	if err != nil {
		t.Fatalf("deploy/replica.yaml with Telegram: %v", err)
	}
	if cfg.Channels.Telegram.Mode != "webhook" || cfg.Channels.Telegram.Webhook.URL != "https://chat.example.com"+cfg.Channels.Telegram.Webhook.Path {
		t.Errorf("deploy/replica.yaml: telegram %s at %s, want webhook at https://chat.example.com%s",
			cfg.Channels.Telegram.Mode, cfg.Channels.Telegram.Webhook.URL, cfg.Channels.Telegram.Webhook.Path)
	}
}

// composeService is what these tests read of a compose.yaml service.
type composeService struct {
	Profiles        []string       `yaml:"profiles"`
	Command         []string       `yaml:"command"`
	Environment     yaml.Node      `yaml:"environment"` // a list or a map
	Volumes         []string       `yaml:"volumes"`
	StopGracePeriod string         `yaml:"stop_grace_period"`
	Build           map[string]any `yaml:"build"`
}

var configVarRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)`)

func TestComposeMatchesTheImage(t *testing.T) {
	var compose struct {
		Services map[string]composeService `yaml:"services"`
	}
	if err := yaml.Unmarshal([]byte(repoFile(t, "compose.yaml")), &compose); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	drain := config.DefaultDrainTimeout
	for _, c := range []struct {
		service, config string
		profiles        []string
	}{
		{"gateway", "deploy/bot.yaml", nil},
		{"replica-1", "deploy/replica.yaml", []string{"postgres"}},
		{"replica-2", "deploy/replica.yaml", []string{"postgres"}},
	} {
		s, ok := compose.Services[c.service]
		if !ok {
			t.Errorf("compose.yaml: no service %s", c.service)
			continue
		}
		if !slices.Equal(s.Profiles, c.profiles) {
			t.Errorf("compose.yaml: %s has profiles %v, want %v", c.service, s.Profiles, c.profiles)
		}
		if s.Build["dockerfile"] != "Containerfile" {
			t.Errorf("compose.yaml: %s is not built from the Containerfile: %v", c.service, s.Build)
		}
		// The stop waits out the drain and the storing of what it cut.
		if grace, err := time.ParseDuration(s.StopGracePeriod); err != nil || grace < drain+10*time.Second {
			t.Errorf("compose.yaml: %s stop_grace_period %q, want at least shutdown.drain_timeout + 10s = %s", c.service, s.StopGracePeriod, drain+10*time.Second)
		}
		// Every variable the configuration reads is passed on.
		passed := map[string]bool{}
		for i, n := range s.Environment.Content {
			if s.Environment.Kind == yaml.SequenceNode {
				name, _, _ := strings.Cut(n.Value, "=")
				passed[name] = true
			} else if i%2 == 0 {
				passed[n.Value] = true
			}
		}
		for _, m := range configVarRE.FindAllStringSubmatch(repoFile(t, c.config), -1) {
			if !passed[m[1]] {
				t.Errorf("compose.yaml: %s does not pass %s, which %s reads", c.service, m[1], c.config)
			}
		}
		// The replicas run the file the compose file mounts.
		if c.config == "deploy/replica.yaml" {
			mounted := ""
			for _, v := range s.Volumes {
				if src, dst, ok := strings.Cut(strings.TrimSuffix(v, ":ro"), ":"); ok && src == "./"+c.config {
					mounted = dst
				}
			}
			if mounted == "" || !slices.Equal(s.Command, []string{"serve", "-c", mounted}) {
				t.Errorf("compose.yaml: %s runs %v, and mounts %s at %q", c.service, s.Command, c.config, mounted)
			}
		}
	}
}
