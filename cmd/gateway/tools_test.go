package main

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/chatgate/chatgate/config"
	"github.com/chatgate/chatgate/tools"
	"github.com/chatgate/chatgate/tools/mcpclient"
)

func loadTools(t *testing.T) *config.Config {
	t.Helper()
	env := map[string]string{"SEARCH_TOKEN": "tok-0123456789-secret", "ALICE_TOKEN": "alice-0123456789abcdef"}
	cfg, err := config.Parse([]byte(toolsYAML), "bot.yaml", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestToolServersFromConfig(t *testing.T) {
	got := toolServers(loadTools(t))
	yes := true
	want := []mcpclient.ServerConfig{{
		Name:           "notes",
		Command:        "chatgate-mcp-demo",
		Args:           []string{"-notes", "notes.txt"},
		Timeout:        30 * time.Second,
		MaxResultBytes: 16 << 10,
		Tools:          []string{"notes_add", "notes_list"},
		Approve:        tools.ApproveAsk,
		PerTool:        map[string]mcpclient.ToolConfig{"notes_list": {Approve: tools.ApproveAuto, Idempotent: &yes}},
	}, {
		Name:           "search",
		URL:            "https://mcp.example.com/search",
		Headers:        map[string]string{"Authorization": "Bearer tok-0123456789-secret"},
		Timeout:        30 * time.Second,
		MaxResultBytes: 16 << 10,
		Approve:        tools.ApproveAuto,
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("toolServers =\n%+v\nwant\n%+v", got, want)
	}
}

// The configuration's defaults of a server are the MCP client's own.
func TestToolDefaultsAgree(t *testing.T) {
	if config.DefaultToolTimeout != mcpclient.DefaultTimeout || config.DefaultToolResultBytes != mcpclient.DefaultMaxResultBytes {
		t.Fatalf("config: %v, %d; tools: %v, %d", config.DefaultToolTimeout, config.DefaultToolResultBytes, mcpclient.DefaultTimeout, mcpclient.DefaultMaxResultBytes)
	}
	if string(tools.ApproveAuto) != config.ApproveAuto || string(tools.ApproveAsk) != config.ApproveAsk || string(tools.ApproveDeny) != config.ApproveDeny {
		t.Fatalf("approve values differ: tools %q %q %q", tools.ApproveAuto, tools.ApproveAsk, tools.ApproveDeny)
	}
}

// A turn gets its channel's servers, less those whose users allowlist
// does not name its user.
func TestToolPolicy(t *testing.T) {
	cfg := loadTools(t)
	offer := toolPolicy(cfg.Agent.Tools.Servers, cfg.Policies())
	for _, tt := range []struct {
		channel, user string
		want          []string
	}{
		{config.ChannelTelegram, "12345", []string{"notes", "search"}},
		{config.ChannelTelegram, "999", []string{"notes"}},
		{config.ChannelWebSocket, "alice", []string{"notes"}}, // websocket gets notes alone (session.tools)
		{config.ChannelWebSocket, "bob", []string{"notes"}},
		{"sms", "12345", nil},
	} {
		if got := offer(tt.channel, tt.user); !slices.Equal(got, tt.want) {
			t.Errorf("toolPolicy(%s, %s) = %q, want %q", tt.channel, tt.user, got, tt.want)
		}
	}
}
