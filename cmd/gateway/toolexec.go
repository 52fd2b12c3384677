package main

// tool-exec: the supervisor of one stdio tool server. The gateway starts
// each stdio server of agent.tools.servers through it ("gateway tool-exec
// -- COMMAND ARGS…"), so that the server and everything it starts (npx
// starts node, a shell its children) die with the gateway however it
// ends: the supervisor puts the server in a process group of its own, is
// told by the kernel when the gateway dies (a parent-death signal, even
// on SIGKILL), and then kills the whole group at once. On a clean stop
// the gateway closes the server's stdin and then sends the supervisor
// SIGTERM: the group gets SIGTERM and a moment to finish, then SIGKILL.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// toolExecGrace is how long a server's group has between SIGTERM and
// SIGKILL on a clean stop: shorter than the gateway's own wait before it
// kills the supervisor (mcpclient's terminateAfter), so that the group
// is always killed by the supervisor, never orphaned by its death.
const toolExecGrace = time.Second

// toolExec runs the server of args ("-parent PID -- COMMAND ARGS…": the
// gateway's pid, then the server's command) in a process group of its
// own, with this process's stdin, stdout and stderr, and returns its exit
// code.
func toolExec(args []string, stderr io.Writer) int {
	parent := 0
	if len(args) > 1 && args[0] == "-parent" {
		parent, _ = strconv.Atoi(args[1])
		args = args[2:]
	}
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 || parent <= 0 {
		fmt.Fprintln(stderr, "gateway tool-exec: want -parent PID -- COMMAND ARGS…")
		return 2
	}
	// Before the server starts, so that no signal of the gateway's is
	// missed once it runs.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, parentDied)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = groupAttr()
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "gateway tool-exec: %v\n", err)
		return 127
	}
	group := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if gatewayGone(parent) {
		// The gateway died before the kernel could be asked to tell us.
		killGroup(group, syscall.SIGKILL)
		<-done
		return 1
	}
	for {
		select {
		case err := <-done:
			killGroup(group, syscall.SIGKILL) // what the server left running
			return exitCode(err)
		case s := <-sigs:
			if s == parentDied {
				killGroup(group, syscall.SIGKILL)
				<-done
				return 1
			}
			killGroup(group, syscall.SIGTERM)
			select {
			case err := <-done:
				killGroup(group, syscall.SIGKILL)
				return exitCode(err)
			case <-time.After(toolExecGrace):
				killGroup(group, syscall.SIGKILL)
				return exitCode(<-done)
			}
		}
	}
}

func killGroup(pgid int, sig syscall.Signal) { _ = syscall.Kill(-pgid, sig) }

func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if code := ee.ExitCode(); code >= 0 {
			return code
		}
		return 1
	}
	return 1
}
