package main

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func clock(t *testing.T, tr mcp.Transport) {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "clock"})
	if err != nil || res.IsError {
		t.Fatalf("clock: %+v, %v", res, err)
	}
}

func TestStdioServesUntilStdinCloses(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	code := make(chan int, 1)
	go func() { code <- run(t.Context(), nil, inR, outW, io.Discard) }()
	clock(t, &mcp.IOTransport{Reader: outR, Writer: inW}) // closing the client closes stdin
	if c := <-code; c != 0 {
		t.Fatalf("exit %d", c)
	}
}

func TestHTTPServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	errR, errW := io.Pipe()
	code := make(chan int, 1)
	go func() { code <- run(ctx, []string{"-http", "127.0.0.1:0"}, nil, nil, errW) }()
	line, err := bufio.NewReader(errR).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, errR)
	_, url, ok := strings.Cut(strings.TrimSpace(line), " at ")
	if !ok {
		t.Fatalf("first line %q names no address", line)
	}
	clock(t, &mcp.StreamableClientTransport{Endpoint: url})
	cancel()
	c := <-code
	errW.Close()
	if c != 0 {
		t.Fatalf("exit %d", c)
	}
}

func TestBadArguments(t *testing.T) {
	for _, args := range [][]string{{"-nope"}, {"extra"}} {
		if c := run(t.Context(), args, nil, nil, io.Discard); c != 2 {
			t.Errorf("%q: exit %d, want 2", args, c)
		}
	}
}
