package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gorilla/websocket"
)

// gatewayStub speaks the part of the gateway's protocol the load client
// uses: hello → ready, then for each message an ack, a delta and the
// reply (reply_to: the message's id); a message whose text has "refuse"
// gets an error frame.
func gatewayStub(t *testing.T, messages *atomic.Int64) string {
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		var hello map[string]string
		if c.ReadJSON(&hello) != nil || hello["type"] != "hello" || hello["user"] == "" {
			return
		}
		c.WriteJSON(map[string]string{"type": "ready", "conversation": "c1"})
		for {
			var m map[string]string
			if c.ReadJSON(&m) != nil {
				return
			}
			messages.Add(1)
			if strings.Contains(hello["user"], "refuse") {
				c.WriteJSON(map[string]string{"type": "error", "code": "rate_limited", "message": "slow down"})
				continue
			}
			c.WriteJSON(map[string]any{"type": "ack", "id": m["id"]})
			c.WriteJSON(map[string]any{"type": "reply", "reply_to": "not-" + m["id"], "text": "another's"})
			c.WriteJSON(map[string]any{"type": "delta", "reply_to": m["id"], "text": "he"})
			c.WriteJSON(map[string]any{"type": "reply", "reply_to": m["id"], "text": m["text"]})
		}
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

func TestLoadCountsRepliesAfterWarmup(t *testing.T) {
	var messages atomic.Int64
	url := gatewayStub(t, &messages)
	out := filepath.Join(t.TempDir(), "r.json")
	var buf bytes.Buffer
	if err := run([]string{"-url", url, "-users", "4", "-duration", "600ms", "-warmup", "200ms", "-json", out}, &buf); err != nil {
		t.Fatalf("run: %v\n%s", err, buf.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r result
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	if r.Errors != 0 || r.Replies == 0 || r.Users != 4 {
		t.Fatalf("result %+v", r)
	}
	// Each message sent was answered; those of the warm-up are not counted.
	if int64(r.Replies) >= messages.Load() {
		t.Fatalf("%d replies counted of %d messages: the warm-up's were counted", r.Replies, messages.Load())
	}
	if r.P50Millis <= 0 || r.P99Millis < r.P50Millis || r.MaxMillis < r.P99Millis || r.PerSecond <= 0 {
		t.Fatalf("latencies %+v", r)
	}
	if !strings.Contains(buf.String(), "4 users") {
		t.Fatalf("output %q", buf.String())
	}
}

func TestLoadReportsErrorFrames(t *testing.T) {
	var messages atomic.Int64
	url := gatewayStub(t, &messages)
	var buf bytes.Buffer
	err := run([]string{"-url", url, "-users", "2", "-duration", "300ms", "-warmup", "0s", "-user-prefix", "refuse"}, &buf)
	if err == nil {
		t.Fatalf("a run with no reply succeeded: %s", buf.String())
	}
	if !strings.Contains(buf.String(), "2 errors") || !strings.Contains(buf.String(), "rate_limited") {
		t.Fatalf("output %q", buf.String())
	}
}

func TestLoadRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-url", "http://127.0.0.1:1/ws"},
		{"-users", "0"},
		{"-duration", "1s", "-warmup", "2s"},
	} {
		if err := run(args, &bytes.Buffer{}); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	// A gateway that is not there: every user fails to connect.
	var buf bytes.Buffer
	if err := run([]string{"-url", "ws://127.0.0.1:1/ws", "-users", "2", "-duration", "200ms", "-warmup", "0s"}, &buf); err == nil {
		t.Fatal("no error without a gateway")
	}
	if !strings.Contains(buf.String(), "2 errors") {
		t.Fatalf("output %q", buf.String())
	}
}
