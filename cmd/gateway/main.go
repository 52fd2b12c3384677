// Command gateway runs chatgate: an LLM agent behind Telegram, a WebSocket
// API and a web chat page, with the conversation state kept in SQLite or
// PostgreSQL.
//
//	gateway [serve] [-c FILE]      run the gateway (./bot.yaml, else embedded defaults)
//	gateway check [-c FILE]        validate and print effective policies
//	gateway reload [-c FILE]       make the running gateway re-read bot.yaml (SIGHUP)
//	gateway sessions list|show|export|reset|purge
//	gateway usage [-c FILE] [-since DAY] [-by user,day,model] [-csv]
//	gateway schedules [-c FILE] [-json] | schedules fires NAME [-limit N]
//	gateway version
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/chatgate/chatgate/internal/gctune"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "tool-exec" {
		// A stdio tool server's supervisor (toolexec.go), started by the
		// gateway itself: no collector tuning, no configuration.
		os.Exit(toolExec(os.Args[2:], os.Stderr))
	}
	gcPercent, gcFrom = gctune.Apply(os.Getenv)
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// gcPercent is the collector's pace the process runs with, and where it
// came from (the GOGC environment variable, or chatgate's default).
var (
	gcPercent = 100
	gcFrom    = "Go default"
)

func gcString() string {
	if gcPercent < 0 {
		return "off (" + gcFrom + ")"
	}
	return fmt.Sprintf("%d (%s)", gcPercent, gcFrom)
}

// version and commit are stamped by the release build (scripts/release.sh,
// the Containerfile):
//
//	-ldflags "-X main.version=v1.2.3 -X main.commit=$(git rev-parse HEAD)"
//
// Unstamped, `gateway version` falls back to what the go command recorded:
// the module's version (go install …@v1.2.3) and the VCS revision of a
// build inside a git checkout.
var (
	version = ""
	commit  = ""
)

const usage = `usage: gateway [command] [flags]

commands:
  serve [-c FILE]                 run the gateway (default command)
  check [-c FILE]                 validate bot.yaml and print each channel's effective policy
  reload [-c FILE]                re-read bot.yaml in the running gateway (SIGHUP through gateway.pid_file)
  reload -admin URL [-token TOKEN]  the same through POST /admin/api/reload
  sessions list [-c FILE] [-key KEY] [-status active|archived] [-limit N]
  sessions show [-c FILE] ID|KEY  a conversation (or a key's conversations) with its messages
  sessions export [-c FILE] [-format json|text|markdown] ID
  sessions reset [-c FILE] KEY    archive the key's active conversation
  sessions purge [-c FILE]        run the retention purge now (storage.retention_days, resume_ttl)
  usage [-c FILE] [-since DAY] [-until DAY] [-user KEY] [-by user,day,model] [-sort COL] [-csv]
                                  tokens and cost by user, day and model (DAY: YYYY-MM-DD, or 7d for the last 7 days)
  schedules [-c FILE] [-last N] [-json]
                                  bot.yaml's schedules: when, target, misfire, quiet, next 3 fires, last outcomes; reminders
  schedules fires [-c FILE] NAME [-limit N] [-json]
                                  one schedule's latest fires
  version                         print the version, the commit and the Go release it was built with

Without -c, ./bot.yaml is used when it exists, else the embedded defaults
(echo agent, SQLite gateway.db, http://127.0.0.1:8765, Telegram when
TELEGRAM_TOKEN is set).
`

// run is main without the process: tests call it directly. Cancelling ctx
// stops a running gateway as SIGTERM does.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && (args[0] == "" || args[0][0] != '-') {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(ctx, args, stdout, stderr)
	case "check":
		return check(args, stdout, stderr)
	case "reload":
		return reloadCmd(args, stdout, stderr)
	case "sessions":
		return sessionsCmd(ctx, args, stdout, stderr)
	case "usage":
		return usageCmd(ctx, args, stdout, stderr)
	case "schedules":
		return schedulesCmd(ctx, args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "chatgate", versionString())
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "gateway: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
}

// versionString is the version, the commit and the Go release of this
// binary, as `gateway version`, the start-up log and the traces' resource
// name them: "v1.2.3 (commit 3e4d55b…, go1.26.8)".
func versionString() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		info = nil
	}
	return describeVersion(version, commit, info)
}

// describeVersion is versionString on given stamps and build information
// (nil when the binary carries none): a stamp wins over what the go
// command recorded.
func describeVersion(version, commit string, info *debug.BuildInfo) string {
	v, c := version, commit
	var details []string
	if info != nil {
		if v == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
		if c == "" {
			c = vcsCommit(info.Settings)
		}
	}
	if v == "" {
		v = "dev"
	}
	if c != "" {
		details = append(details, "commit "+c)
	}
	if info != nil {
		details = append(details, info.GoVersion)
	}
	if len(details) == 0 {
		return v
	}
	return v + " (" + strings.Join(details, ", ") + ")"
}

// vcsCommit is the revision the go command recorded for a build inside a
// checkout (vcs.revision), with "-dirty" when the work tree had changes
// (vcs.modified): the form scripts/release.sh stamps. "" when the build
// recorded none (-buildvcs=false, no checkout, go run).
func vcsCommit(settings []debug.BuildSetting) string {
	var rev string
	var modified bool
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev != "" && modified {
		rev += "-dirty"
	}
	return rev
}
