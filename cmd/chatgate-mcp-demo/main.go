// Command chatgate-mcp-demo is a small MCP server to try chatgate's
// tools with: notes_add, notes_list, counter, slow and clock (see package
// demo). It speaks stdio, as a gateway starts it:
//
//	go run ./cmd/chatgate-mcp-demo
//
// or streamable HTTP with -http:
//
//	go run ./cmd/chatgate-mcp-demo -http 127.0.0.1:8931
//
// -notes FILE (or $CHATGATE_DEMO_NOTES) keeps the notes in a file,
// -count-file FILE the counter's count and slow's starts; -slow-once makes
// slow take its time on its first start only (later starts answer at
// once), for tests that stop a gateway during a call and start it again.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatgate/chatgate/cmd/chatgate-mcp-demo/demo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run serves until ctx ends or, over stdio, the client closes stdin.
func run(ctx context.Context, args []string, stdin io.ReadCloser, stdout io.WriteCloser, stderr io.Writer) int {
	fl := flag.NewFlagSet("chatgate-mcp-demo", flag.ContinueOnError)
	fl.SetOutput(stderr)
	addr := fl.String("http", "", "serve streamable HTTP at this address (host:port) instead of stdio")
	notes := fl.String("notes", os.Getenv("CHATGATE_DEMO_NOTES"), "keep the notes in this file (default: in memory; $CHATGATE_DEMO_NOTES)")
	countFile := fl.String("count-file", "", "keep counter's count and slow's starts in this file (JSON)")
	slowOnce := fl.Bool("slow-once", false, "slow takes its time on its first start only; later starts answer at once")
	startDelay := fl.Duration("start-delay", 0, "wait this long before serving (a server slow to start, as npm's are)")
	pidFile := fl.String("pid-file", "", "write the process id to this file once serving")
	linger := fl.Duration("linger", 0, "over stdio: once the client closed stdin, keep running this long (a server finishing its work with nobody to tell)")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "chatgate-mcp-demo: unexpected arguments %q\n", fl.Args())
		return 2
	}
	server := demo.New(demo.Options{Notes: *notes, CountFile: *countFile, SlowOnce: *slowOnce})
	if *pidFile != "" {
		if err := os.WriteFile(*pidFile, []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
			fmt.Fprintf(stderr, "chatgate-mcp-demo: %v\n", err)
			return 1
		}
	}
	if *startDelay > 0 {
		select {
		case <-time.After(*startDelay):
		case <-ctx.Done():
			return 0
		}
	}

	if *addr == "" {
		err := server.Run(ctx, &mcp.IOTransport{Reader: stdin, Writer: stdout})
		if err != nil && ctx.Err() == nil && !errors.Is(err, mcp.ErrConnectionClosed) && !errors.Is(err, io.EOF) {
			fmt.Fprintf(stderr, "chatgate-mcp-demo: %v\n", err)
			return 1
		}
		if *linger > 0 {
			select {
			case <-time.After(*linger):
			case <-ctx.Done():
			}
		}
		return 0
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(stderr, "chatgate-mcp-demo: %v\n", err)
		return 1
	}
	// Ending the requests' context ends the open event streams, which
	// Shutdown would otherwise wait for.
	base, endRequests := context.WithCancel(context.Background())
	defer endRequests()
	srv := &http.Server{
		Handler:           demo.Handler(server),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	fmt.Fprintf(stderr, "chatgate-mcp-demo: serving MCP (streamable HTTP) at http://%s\n", ln.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		fmt.Fprintf(stderr, "chatgate-mcp-demo: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	endRequests()
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		_ = srv.Close()
	}
	return 0
}
