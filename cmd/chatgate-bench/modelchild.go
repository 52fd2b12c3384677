package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// The time-to-first-delta rows call a streaming model server in a child
// process, as a deployment calls a model on another host: its handler's
// goroutines do not share the gateway's scheduler, so what the gateway
// runs beside a call (the message's commit) does not hold up the model
// server's receipt of the request, nor the other way round. The direct
// calls go to the same child, so both sides pay the same hop. The
// breakdown's timed model server (-breakdown, timedLLM) runs in a child
// too, and hands its clocks to the parent at /clocks.

// serveModelChild serves the streaming model server (first chunk after
// firstChunk, the others gap apart), timed when clocks is set (timedLLM),
// prints its base URL, and serves until its stdin closes.
func serveModelChild(firstChunk, gap time.Duration, clocks bool, stdin io.Reader, stdout, stderr io.Writer) int {
	serve := streamingLLM
	if clocks {
		serve = timedLLM
	}
	base, stop, err := serve(firstChunk, gap)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer stop()
	fmt.Fprintf(stdout, "URL %s\n", base)
	io.Copy(io.Discard, stdin) // until the parent closes it, or exits
	return 0
}

// childLLM starts the model server child, timed when clocks is set, and
// returns its base URL and how to stop it.
func childLLM(ctx context.Context, firstChunk, gap time.Duration, clocks bool) (baseURL string, stop func(), err error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	args := []string{"-serve-model", "-llm-first-chunk", firstChunk.String(), "-llm-chunk-gap", gap.String()}
	if clocks {
		args = append(args, "-serve-model-clocks")
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() { stdin.Close(); cmd.Wait() }
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "URL ") {
		stop()
		return "", nil, fmt.Errorf("model server did not start: %q %v", line, err)
	}
	return strings.TrimSpace(strings.TrimPrefix(line, "URL ")), stop, nil
}
