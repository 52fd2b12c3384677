package config

import "testing"

func TestDefaultPidFile(t *testing.T) {
	for _, c := range []struct{ file, yaml, want string }{
		{"/etc/chatgate/bot.yaml", "storage:\n  dsn: /var/lib/chatgate/gateway.db\n", "/var/lib/chatgate/gateway.pid"},
		{"/etc/chatgate/bot.yaml", "", "gateway.pid"}, // next to ./gateway.db
		{"/etc/chatgate/bot.yaml", "storage:\n  driver: postgres\n  dsn: postgres://db/chatgate\n", "/etc/chatgate/gateway.pid"},
		{"/etc/chatgate/bot.yaml", "gateway:\n  pid_file: /run/chatgate.pid\n", "/run/chatgate.pid"},
	} {
		cfg, err := Parse([]byte(c.yaml), c.file, func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatalf("%q: %v", c.yaml, err)
		}
		if cfg.Gateway.PidFile != c.want {
			t.Errorf("%q: pid_file = %q, want %q", c.yaml, cfg.Gateway.PidFile, c.want)
		}
	}
}
