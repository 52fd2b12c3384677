package mcpclient

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestScrubberHidesTheURLsSecrets(t *testing.T) {
	const raw = "https://ann:p%40ss-word@mcp.example:8443/v1/mcp?apikey=SECRETKEY&tenant=acme%2Fprod&v=1"
	sc := newScrubber(raw)
	for _, tc := range []struct{ in, want string }{
		{raw, "https://mcp.example:8443/v1/mcp?…"},
		{`Post "https://ann:***@mcp.example:8443/v1/mcp?apikey=SECRETKEY&tenant=acme%2Fprod&v=1": EOF`, `Post "https://mcp.example:8443/v1/mcp?…": EOF`},
		{"https://ann:xxxxx@mcp.example:8443/v1/mcp?apikey=SECRETKEY&tenant=acme%2Fprod&v=1", "https://mcp.example:8443/v1/mcp?…"},
		{"bad key SECRETKEY for tenant acme/prod", "bad key … for tenant …"},
		{"password p@ss-word, escaped p%40ss-word", "password …, escaped …"},
		{"version 1 of 127.0.0.1", "version 1 of 127.0.0.1"}, // a value too short to hide alone
		{"nothing to see", "nothing to see"},
	} {
		if got := sc.text(tc.in); got != tc.want {
			t.Errorf("text(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if newScrubber("http://127.0.0.1:9/mcp") != nil || newScrubber("") != nil {
		t.Error("a URL with nothing secret has a scrubber")
	}
	if got := sc.err(errors.New("dial SECRETKEY")).Error(); got != "dial …" {
		t.Errorf("err = %q", got)
	}

	// Every message and attribute, also in groups and in With.
	var buf bytes.Buffer
	log := sc.logger(slog.New(slog.NewJSONHandler(&buf, nil))).With(slog.String("url", raw))
	log.Warn("connect to "+raw+" failed", slog.Any("error", errors.New("key SECRETKEY refused")),
		slog.Group("g", slog.String("pw", "p@ss-word")), slog.Int("n", 3))
	for _, secret := range []string{"SECRETKEY", "ann", "p@ss-word", "p%40ss-word", "acme%2Fprod", "acme/prod"} {
		if strings.Contains(buf.String(), secret) {
			t.Errorf("log holds %q: %s", secret, buf.String())
		}
	}
	if !strings.Contains(buf.String(), `"n":3`) || !strings.Contains(buf.String(), `"g":{"pw":"…"}`) {
		t.Errorf("log lost what was no secret: %s", buf.String())
	}
}
