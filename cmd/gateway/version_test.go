package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// The release build (scripts/release.sh, which the Containerfile runs
// too) stamps the version and commit with -ldflags -X into a static,
// stripped binary, and `gateway version` prints them.
func TestReleaseBuildStampsVersionAndCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary: skipped in -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("the release build makes Linux binaries")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("scripts/release.sh needs bash")
	}
	out := t.TempDir()
	const (
		stampVersion = "v9.8.7-test"
		stampCommit  = "0123456789abcdef0123456789abcdef01234567-dirty"
	)
	platform := runtime.GOOS + "/" + runtime.GOARCH
	cmd := exec.Command(bash, filepath.Join("..", "..", "scripts", "release.sh"))
	cmd.Env = append(os.Environ(), "VERSION="+stampVersion, "COMMIT="+stampCommit, "PLATFORMS="+platform, "OUT="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release.sh: %v\n%s", err, b)
	}
	name := "gateway-" + runtime.GOOS + "-" + runtime.GOARCH
	bin := filepath.Join(out, name)

	got, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("%s version: %v", name, err)
	}
	want := "chatgate " + stampVersion + " (commit " + stampCommit + ", " + runtime.Version() + ")\n"
	if string(got) != want {
		t.Fatalf("%s version = %q, want %q", name, got, want)
	}

	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a program interpreter: it is linked dynamically, and will not run FROM scratch", name)
		}
	}
	if f.Section(".symtab") != nil {
		t.Errorf("%s has a symbol table: not stripped (-s)", name)
	}
	if f.Section(".debug_info") != nil || f.Section(".zdebug_info") != nil {
		t.Errorf("%s has DWARF: not stripped (-w)", name)
	}

	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if fields := strings.Fields(string(sums)); len(fields) != 2 || fields[1] != name || len(fields[0]) != 64 {
		t.Errorf("SHA256SUMS = %q, want one sum for %s", sums, name)
	}
}

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
