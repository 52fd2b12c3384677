//go:build !linux

package mcpclient

import "syscall"

// diesWithGateway: elsewhere than Linux there is no parent-death signal;
// a server whose gateway was killed ends when its stdin closes.
func diesWithGateway(bool) *syscall.SysProcAttr { return nil }
