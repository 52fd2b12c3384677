package main

import (
	"runtime/debug"
	"testing"
)

// A stamp wins over what the go command recorded; without one, the VCS
// revision stands in for the commit, with -dirty for a modified tree.
func TestDescribeVersion(t *testing.T) {
	vcs := func(rev, modified string) *debug.BuildInfo {
		info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}
		if rev != "" {
			info.Settings = append(info.Settings, debug.BuildSetting{Key: "vcs.revision", Value: rev})
		}
		if modified != "" {
			info.Settings = append(info.Settings, debug.BuildSetting{Key: "vcs.modified", Value: modified})
		}
		return info
	}
	installed := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.4.0"}}
	for _, c := range []struct {
		name            string
		version, commit string
		info            *debug.BuildInfo
		want            string
	}{
		{"stamped", "v1.2.3", "abc123", vcs("fff999", "true"), "v1.2.3 (commit abc123, go1.26.8)"},
		{"stamped version only", "v1.2.3", "", vcs("fff999", "false"), "v1.2.3 (commit fff999, go1.26.8)"},
		{"clean checkout", "", "", vcs("fff999", "false"), "dev (commit fff999, go1.26.8)"},
		{"modified checkout", "", "", vcs("fff999", "true"), "dev (commit fff999-dirty, go1.26.8)"},
		{"no checkout", "", "", vcs("", ""), "dev (go1.26.8)"},
		{"go install @version", "", "", installed, "v1.4.0 (go1.26.8)"},
		{"no build info", "", "", nil, "dev"},
		{"no build info, stamped", "v1.2.3", "abc123", nil, "v1.2.3 (commit abc123)"},
	} {
		if got := describeVersion(c.version, c.commit, c.info); got != c.want {
			t.Errorf("%s: describeVersion = %q, want %q", c.name, got, c.want)
		}
	}
}
