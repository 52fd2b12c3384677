package sessions_test

import (
	"testing"

	"github.com/chatgate/chatgate/sessions"
)

// startRescuer listens to other replicas' events and starts m's Rescuer,
// as the gateway's wiring does; it stops with the test.
func startRescuer(t testing.TB, m *sessions.Manager) {
	t.Helper()
	r := m.Rescuer()
	r.Listen()
	r.Start()
	t.Cleanup(r.Stop)
}
