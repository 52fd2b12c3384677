package config

import (
	"strings"
	"testing"
)

func TestAdminTokens(t *testing.T) {
	c := mustParse(t, `
admin:
  tokens:
    ops: 0123456789abcdef-ops
`)
	if !c.AdminEnabled() || c.Admin.Tokens["ops"] != "0123456789abcdef-ops" {
		t.Fatalf("admin = %+v", c.Admin)
	}
	if mustParse(t, "log:\n  level: info\n").AdminEnabled() {
		t.Fatal("admin enabled without tokens")
	}

	_, err := parse(t, `
channels:
  websocket:
    auth_tokens:
      alice: shared-token-0123456789
admin:
  tokens:
    empty: ""
    blank: "   "
    short: abc
    ops: shared-token-0123456789
    ops2: other-token-0123456789
    ops3: other-token-0123456789
`)
	if err == nil {
		t.Fatal("bad admin tokens accepted")
	}
	text := err.Error()
	for _, want := range []string{
		"admin.tokens.empty: token is empty",
		"admin.tokens.blank: token is empty",
		"admin.tokens.short: token is shorter than 16 characters",
		"admin.tokens.ops: same token as a channels.websocket.auth_tokens entry",
		"same token as ops",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("errors lack %q:\n%s", want, text)
		}
	}
}
