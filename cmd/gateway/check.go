package main

import (
	"fmt"
	"io"
)

// check validates a configuration and prints each channel's effective
// policy with where every value came from. Errors go to stderr as
// file:line: key: message, one per line, and the exit code is 1.
func check(args []string, stdout, stderr io.Writer) int {
	fs, path := configFlag("check", stderr)
	cfg, code := parseConfig(fs, path, args, stderr)
	if cfg == nil {
		return code
	}
	fmt.Fprintf(stdout, "%s: ok\n", cfg.File)
	fmt.Fprintf(stdout, "storage %s, agent %s, listening on %s\n\n", cfg.Storage.Driver, cfg.Agent.Backend, cfg.Gateway.Listen)
	cfg.Describe(stdout)
	return 0
}
