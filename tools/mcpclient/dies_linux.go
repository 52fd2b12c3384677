package mcpclient

import "syscall"

// diesWithGateway is how a stdio server's process is started on Linux:
// with a parent-death signal, so that the kernel tells it when the
// gateway dies, however it dies. A supervisor gets SIGUSR2, on which it
// kills the server's process group; a server started directly is killed.
func diesWithGateway(supervised bool) *syscall.SysProcAttr {
	if supervised {
		return &syscall.SysProcAttr{Pdeathsig: syscall.SIGUSR2}
	}
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
