package main

import (
	"os"
	"syscall"
)

// parentDied is the signal the kernel sends the supervisor when the
// gateway dies (mcpclient starts it with it as its parent-death signal).
const parentDied = syscall.SIGUSR2

// groupAttr puts the server in a process group of its own; the server
// itself also dies with the supervisor (a supervisor killed outright).
func groupAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// gatewayGone reports whether the gateway that started the supervisor
// (whose pid it was given: a gateway may itself be pid 1, in a
// container) is gone already.
func gatewayGone(parent int) bool { return os.Getppid() != parent }
