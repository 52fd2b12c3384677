package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The examples of README.md and docs/ are run where they are commands:
//
//   - every ```yaml block is a bot.yaml and must pass `gateway check -c`
//     (each ${VAR} it needs is set to a sample value);
//   - every `gateway …` example, inline or in a shell block (`go run
//     ./cmd/gateway …`), is run when it is concrete (`gateway check -c
//     bot.yaml`, `gateway version`), against a bot.yaml in a temporary
//     directory; a synopsis (`gateway sessions list [-key K] …`, with
//     placeholders) must name a command whose -h lists each of its flags.
//
// Not run: `gateway serve` and the bare `gateway`/`go run ./cmd/gateway`
// (they serve until stopped; serve's flags are checked through -h);
// `go test` and `go run ./cmd/chatgate-bench` lines (they are the test
// suite and a minutes-long benchmark); systemd units, diagrams, protocol
// transcripts and sample output (not commands). The README's `gateway
// check` output is compared with the real output of the bot.yaml it shows
// in TestReadmeCheckOutputIsReal; the shortened output under "Busy modes"
// in docs/configuration.md shows no bot.yaml and is not compared.

// docBlock is one fenced code block of a document.
type docBlock struct {
	where string // file:line of the opening fence
	lang  string
	body  string
}

func docFiles(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	paths = append(paths, filepath.Join("..", "..", "README.md"))
	out := map[string]string{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimPrefix(p, filepath.Join("..", "..")+string(filepath.Separator))] = string(data)
	}
	if len(out) < 6 {
		t.Fatalf("found %d documents, want README.md and docs/*.md", len(out))
	}
	return out
}

var fenceRE = regexp.MustCompile("(?ms)^( *)```(\\w*)\\n(.*?)^ *```")

func docBlocks(t *testing.T) []docBlock {
	t.Helper()
	var out []docBlock
	for name, text := range docFiles(t) {
		for _, m := range fenceRE.FindAllStringSubmatchIndex(text, -1) {
			indent := text[m[2]:m[3]]
			var body strings.Builder
			for _, l := range strings.SplitAfter(text[m[6]:m[7]], "\n") {
				body.WriteString(strings.TrimPrefix(l, indent))
			}
			out = append(out, docBlock{
				where: name + ":" + strconv.Itoa(strings.Count(text[:m[0]], "\n")+1),
				lang:  text[m[4]:m[5]],
				body:  body.String(),
			})
		}
	}
	return out
}

var envRefRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// sampleEnv sets every ${VAR} (without a default) of body to a value that
// passes the checks of the keys such variables fill: tokens and secrets of
// 16 characters and more, made of letters, digits and dashes.
func sampleEnv(t *testing.T, body string) {
	t.Helper()
	for _, m := range envRefRE.FindAllStringSubmatch(body, -1) {
		t.Setenv(m[1], "sample-"+strings.ToLower(strings.ReplaceAll(m[1], "_", "-"))+"-0123456789")
	}
}

func TestDocYAMLExamplesPassCheck(t *testing.T) {
	n := 0
	for _, b := range docBlocks(t) {
		if b.lang != "yaml" && b.lang != "yml" {
			continue
		}
		n++
		t.Run(b.where, func(t *testing.T) {
			sampleEnv(t, b.body)
			path := writeConfig(t, b.body)
			if code, out, errOut := runCmd(t, "check", "-c", path); code != 0 {
				t.Fatalf("gateway check -c on the example of %s = %d\n%s%s", b.where, code, out, errOut)
			}
		})
	}
	if n < 4 {
		t.Fatalf("found %d yaml examples; the docs have at least 4", n)
	}
}

// docCommand is one `gateway …` example.
type docCommand struct {
	where string
	args  []string
}

var inlineGatewayRE = regexp.MustCompile("`gateway( [^`]*)?`")

func docCommands(t *testing.T) []docCommand {
	t.Helper()
	var out []docCommand
	add := func(where, line string) {
		line = strings.ReplaceAll(line, `\|`, "|")
		out = append(out, docCommand{where, strings.Fields(line)})
	}
	for name, text := range docFiles(t) {
		for _, m := range inlineGatewayRE.FindAllStringSubmatchIndex(text, -1) {
			if lineStart := strings.LastIndex(text[:m[0]], "\n") + 1; strings.HasPrefix(text[lineStart:], "#") {
				continue // a heading names the bot.yaml section `gateway`, not the command
			}
			args := ""
			if m[2] >= 0 {
				args = text[m[2]:m[3]]
			}
			add(name+":"+strconv.Itoa(strings.Count(text[:m[0]], "\n")+1), args)
		}
	}
	for _, b := range docBlocks(t) {
		if b.lang != "sh" && b.lang != "bash" {
			continue
		}
		for _, l := range strings.Split(b.body, "\n") {
			if _, after, ok := strings.Cut(l, "go run ./cmd/gateway"); ok {
				after, _, _ = strings.Cut(after, "#")
				add(b.where, after)
			}
		}
	}
	return out
}

var placeholderRE = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$|[\[\]|]`)

func TestDocCommandExamplesRun(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, "storage:\n  dsn: "+filepath.Join(dir, "gateway.db")+"\n")
	cmds := docCommands(t)
	t.Chdir(dir) // a bare `gateway check` reads ./bot.yaml, else the embedded defaults
	ran, synopses := 0, 0
	for _, c := range cmds {
		args := c.args
		t.Run(c.where+" gateway "+strings.Join(args, " "), func(t *testing.T) {
			synopsis := false
			for _, a := range args {
				synopsis = synopsis || placeholderRE.MatchString(a)
			}
			switch {
			case len(args) == 0 || args[0] == "serve":
				// Serves until stopped: only its flags are checked.
				checkHelpLists(t, []string{"serve"}, args)
			case args[0] == "sessions" && len(args) == 1:
				// The command group, named in prose: it lists its
				// subcommands.
				code, _, errOut := runCmd(t, "sessions")
				if code != 2 || !strings.Contains(errOut, "want list, show, export, reset or purge") {
					t.Fatalf("gateway sessions = %d\n%s", code, errOut)
				}
			case synopsis:
				synopses++
				cmd := args[:1]
				if args[0] == "sessions" {
					cmd = args[:2]
				}
				checkHelpLists(t, cmd, args)
			default:
				ran++
				run := append([]string(nil), args...)
				for i := range run {
					if i > 0 && run[i-1] == "-c" && run[i] == "bot.yaml" {
						run[i] = cfg
					}
				}
				if code, out, errOut := runCmd(t, run...); code != 0 {
					t.Fatalf("gateway %s = %d\n%s%s", strings.Join(args, " "), code, out, errOut)
				}
			}
		})
	}
	if ran < 3 || synopses < 5 {
		t.Fatalf("ran %d concrete examples and checked %d synopses; the docs have at least 3 and 5", ran, synopses)
	}
}

// checkHelpLists runs `gateway <cmd> -h` and checks that the command exists
// and that each flag of the example is one of its flags.
func checkHelpLists(t *testing.T, cmd, example []string) {
	t.Helper()
	code, _, errOut := runCmd(t, append(append([]string(nil), cmd...), "-h")...)
	if code != 2 || !strings.Contains(errOut, "Usage of "+strings.Join(cmd, " ")+":") {
		t.Fatalf("gateway %s -h = %d, not a command's flag list:\n%s", strings.Join(cmd, " "), code, errOut)
	}
	for _, a := range example {
		a = strings.Trim(a, "[]")
		if strings.HasPrefix(a, "-") {
			if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(a) + `\b`).MatchString(errOut) {
				t.Errorf("the example's flag %s is not a flag of gateway %s:\n%s", a, strings.Join(cmd, " "), errOut)
			}
		}
	}
}

// The README shows a bot.yaml and what `gateway check -c bot.yaml` prints
// for it; the printed lines are the real ones.
func TestReadmeCheckOutputIsReal(t *testing.T) {
	var yamlBlock, output *docBlock
	blocks := docBlocks(t)
	for i := range blocks {
		b := &blocks[i]
		if !strings.HasPrefix(b.where, "README.md:") {
			continue
		}
		if output != nil {
			break // the first example with its output
		}
		if b.lang == "yaml" {
			yamlBlock = b
		}
		if b.lang == "" && strings.HasPrefix(b.body, "channel telegram") && yamlBlock != nil {
			output = b
		}
	}
	if yamlBlock == nil || output == nil {
		t.Fatal("README.md has no bot.yaml example followed by its gateway check output")
	}
	sampleEnv(t, yamlBlock.body)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bot.yaml"), []byte(yamlBlock.body), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	code, out, errOut := runCmd(t, "check", "-c", "bot.yaml")
	if code != 0 {
		t.Fatalf("gateway check -c bot.yaml = %d\n%s", code, errOut)
	}
	if !strings.Contains(out, output.body) {
		t.Fatalf("README.md shows (%s)\n%s\nbut gateway check prints\n%s", output.where, output.body, out)
	}
}
