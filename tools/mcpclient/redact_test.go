package mcpclient_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/chatgate/chatgate/tools/mcpclient"
)

// logBuffer is a slog handler's output, and a signal for each record
// whose message holds a given text.
type logBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	text string
	seen chan struct{}
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if bytes.Contains(p, []byte(b.text)) {
		select {
		case b.seen <- struct{}{}:
		default:
		}
	}
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// refusedURL is the address of a loopback port nobody listens on.
func refusedURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// A server's URL may carry secrets in its userinfo and its query: the
// retries of a server that is down log why, and its status says why,
// without them.
func TestServerURLSecretsAreNeverLoggedNorInTheStatus(t *testing.T) {
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusInternalServerError)
	}))
	t.Cleanup(failing.Close)
	const user, password, key = "gateuser", "hunter2pw", "SECRETKEY42"
	for name, base := range map[string]string{"refused": refusedURL(t), "500": failing.URL} {
		t.Run(name, func(t *testing.T) {
			host := strings.TrimPrefix(base, "http://")
			raw := "http://" + user + ":" + password + "@" + host + "/mcp?apikey=" + key + "&x=a%2Fb"
			logs := &logBuffer{text: "starting it again", seen: make(chan struct{}, 8)}
			logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			set := mcpclient.New([]mcpclient.ServerConfig{{Name: "web", URL: raw}}, logger)
			set.Start(t.Context())
			t.Cleanup(set.Close)
			// Two failed starts: each is logged before its retry.
			for i := 0; i < 2; i++ {
				select {
				case <-logs.seen:
				case <-waitCtx(t).Done():
					t.Fatalf("no failed start logged %d times: %s", i+1, logs)
				}
			}
			st := set.Servers()[0]
			if st.Connected || st.LastError == "" {
				t.Fatalf("status %+v, want down with a reason", st)
			}
			if name == "refused" && !strings.Contains(st.LastError, "http://"+host+"/mcp?…") {
				t.Errorf("last error %q does not name the server as http://%s/mcp?…", st.LastError, host)
			}
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			waitErr := set.WaitListed(ctx, "web")
			for what, text := range map[string]string{"log": logs.String(), "last error": st.LastError, "wait error": waitErr.Error()} {
				for _, secret := range []string{password, key, user, "a%2Fb", "a/b"} {
					if strings.Contains(text, secret) {
						t.Errorf("%s holds %q: %s", what, secret, text)
					}
				}
			}
			t.Logf("last error: %s", st.LastError)
		})
	}
}
