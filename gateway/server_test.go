package gateway

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// readyz asks srv's /readyz and returns the status and the body.
func readyz(t *testing.T, srv *Server) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	srv.mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	body, _ := io.ReadAll(rec.Body)
	return rec.Code, string(body)
}

// /readyz lists, one line each, everything that is not ready.
func TestReadyzListsWhatIsNotReady(t *testing.T) {
	srv := New(quiet)
	var botErr atomic.Pointer[error]
	connecting := errors.New("connecting to the Bot API (last error: dial tcp 127.0.0.1:1: connection refused)")
	botErr.Store(&connecting)
	srv.AddCheck("storage", func() error { return nil })
	srv.AddCheck("telegram", func() error { return *botErr.Load() })

	steps := []struct {
		do         func()
		wantStatus int
		wantBody   string
	}{
		{nil, 503, "starting\ntelegram: connecting to the Bot API (last error: dial tcp 127.0.0.1:1: connection refused)\n"},
		{srv.Started, 503, "telegram: connecting to the Bot API (last error: dial tcp 127.0.0.1:1: connection refused)\n"},
		{func() { var none error; botErr.Store(&none) }, 200, "ready\n"},
		{func() { multi := errors.New("ping failed:\nline two"); botErr.Store(&multi) }, 503, "telegram: ping failed: line two\n"},
		{func() { var none error; botErr.Store(&none); srv.Drain() }, 503, "draining\n"},
		{srv.Started, 503, "draining\n"}, // a drain is for good
	}
	for i, s := range steps {
		if s.do != nil {
			s.do()
		}
		if code, body := readyz(t, srv); code != s.wantStatus || body != s.wantBody {
			t.Fatalf("step %d: /readyz = %d %q, want %d %q", i, code, body, s.wantStatus, s.wantBody)
		}
	}
}
