package main

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is this repository's module path.
const module = "github.com/chatgate/chatgate"

// portPackages are the domain, the channels, the admin API and the
// ports they consume: they depend on interfaces they declare (or that
// agent, tools and sessions/query declare), never on an SDK or a
// database driver.
var portPackages = []string{
	module + "/sessions",
	module + "/sessions/ledger",
	module + "/sessions/query",
	module + "/locks",
	module + "/gateway",
	module + "/bots/telegram",
	module + "/admin",
	module + "/agent",
	module + "/tools",
}

// adapterModules are what only the adapters (agent/openai,
// tools/mcpclient, sessions/store) and this package's wiring import:
// the model SDK, the MCP SDK, the PostgreSQL driver, GORM and the SQLite
// engine, by import path prefix.
var adapterModules = []string{
	"github.com/openai/openai-go",
	"github.com/modelcontextprotocol/go-sdk",
	"github.com/jackc/pgx",
	"gorm.io/",
	"github.com/ncruces/go-sqlite3",
}

// The domain, the channels and the admin API reach no SDK and no
// driver, directly or through another package: each of portPackages is
// listed with `go list -deps`, and a package of adapterModules among its
// dependencies fails the test with the chain of imports that reaches it. The wiring itself
// (this package) must reach every one of them, or the listing is not
// the real one.
func TestPortsReachNoSDKOrDriver(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH to list the packages' dependencies with")
	}
	wiring := module + "/cmd/gateway"
	args := append([]string{"list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}"}, portPackages...)
	cmd := exec.Command(goTool, append(args, wiring)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	imports := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 {
			imports[f[0]] = f[1:]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}

	for _, m := range adapterModules {
		if reaches(imports, wiring, m) == nil {
			t.Fatalf("the wiring reaches no package of %s: the listing is not the real one", m)
		}
	}
	for _, p := range portPackages {
		if _, ok := imports[p]; !ok {
			t.Fatalf("go list did not list %s", p)
		}
		for _, m := range adapterModules {
			if chain := reaches(imports, p, m); chain != nil {
				t.Errorf("%s reaches %s: %s", strings.TrimPrefix(p, module+"/"), m, strings.Join(chain, " → "))
			}
		}
	}
}

// reaches is the shortest chain of imports from the package from to a
// package whose import path starts with prefix, or nil when there is
// none.
func reaches(imports map[string][]string, from, prefix string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if strings.HasPrefix(p, prefix) {
			var chain []string
			for q := p; q != ""; q = prev[q] {
				chain = append(chain, strings.TrimPrefix(q, module+"/"))
			}
			slices.Reverse(chain)
			return chain
		}
		for _, q := range imports[p] {
			if _, seen := prev[q]; !seen {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return nil
}
