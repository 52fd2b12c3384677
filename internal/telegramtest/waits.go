package telegramtest

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// Waiting for what the bot does: bounded, woken by every request and
// every message sent, never a sleep.

// WaitPolling waits until n getUpdates requests have come and the latest
// is waiting for updates, bounded.
func (a *Server) WaitPolling(t testing.TB, n int) {
	t.Helper()
	a.waitFor(t, func() bool { return a.polls >= n && a.waiting != nil }, func() string {
		return fmt.Sprintf("%d getUpdates requests, want %d with the latest waiting (one waiting: %v)", a.polls, n, a.waiting != nil)
	})
}

// WaitPending waits until at most n updates are left unconfirmed (or
// dropped, being of a kind the bot did not ask for), bounded.
func (a *Server) WaitPending(t testing.TB, n int) {
	t.Helper()
	a.waitFor(t, func() bool { return len(a.updates) <= n }, func() string {
		return fmt.Sprintf("%d updates pending, want at most %d", len(a.updates), n)
	})
}

// WaitSent waits until n messages have been sent, bounded.
func (a *Server) WaitSent(t testing.TB, n int) []Sent {
	t.Helper()
	a.waitFor(t, func() bool { return len(a.sent) >= n }, func() string {
		return fmt.Sprintf("%d messages sent, want %d; the last: %+v", len(a.sent), n, a.sent[max(len(a.sent)-5, 0):])
	})
	return a.Messages()
}

// WaitSentWithin waits until n messages were sent, at most within, and
// reports whether they were (for a caller that fails with more to say).
func (a *Server) WaitSentWithin(n int, within time.Duration) bool {
	return a.waitUntil(func() bool { return len(a.sent) >= n }, within)
}

// WaitConfirmed waits until the bot asked getUpdates with an offset above
// updateID: it has confirmed that update (and every one before it).
func (a *Server) WaitConfirmed(t testing.TB, updateID int) {
	t.Helper()
	a.waitFor(t, func() bool {
		for _, c := range a.calls {
			if n, _ := strconv.Atoi(c.Params.Get("offset")); c.Method == "getUpdates" && n > updateID {
				return true
			}
		}
		return false
	}, func() string { return fmt.Sprintf("update %d never confirmed", updateID) })
}

// waitFor waits, under the lock, until cond holds; every request and every
// sent message wakes it. It fails the test after 20 s.
func (a *Server) waitFor(t testing.TB, cond func() bool, why func() string) {
	t.Helper()
	if !a.waitUntil(cond, 20*time.Second) {
		a.mu.Lock()
		msg := why()
		a.mu.Unlock()
		t.Fatal(msg)
	}
}

// waitUntil waits, under the lock, until cond holds or within has passed,
// and reports whether it held; every request, every sent message and Poke
// wake it.
func (a *Server) waitUntil(cond func() bool, within time.Duration) bool {
	expired := false
	timer := time.AfterFunc(within, func() {
		a.mu.Lock()
		expired = true
		a.cond.Broadcast()
		a.mu.Unlock()
	})
	defer timer.Stop()
	a.mu.Lock()
	defer a.mu.Unlock()
	for !cond() {
		if expired {
			return false
		}
		a.cond.Wait()
	}
	return true
}
