//go:build !linux

package main

import "syscall"

// Elsewhere than Linux there is no parent-death signal: the supervisor
// ends the server's group on a clean stop, and a server whose gateway was
// killed ends when its stdin closes.
const parentDied = syscall.SIGUSR2

func groupAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func gatewayGone(int) bool { return false }
