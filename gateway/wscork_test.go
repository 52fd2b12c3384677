package gateway

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// countingListener counts the writes to the connections it accepts: each
// is one write to the socket.
type countingListener struct {
	net.Listener
	mu     sync.Mutex
	writes int
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, l: l}, nil
}

func (l *countingListener) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.writes
}

type countingConn struct {
	net.Conn
	l *countingListener
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.l.mu.Lock()
	c.l.writes++
	c.l.mu.Unlock()
	return c.Conn.Write(p)
}

// A batch of frames written while corked — a long one among them, which
// gorilla/websocket writes as several frames of its write buffer — reaches
// the socket in one write, and the client reads every message whole and in
// order.
func TestCorkedFramesGoOutInOneWrite(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	up := websocket.Upgrader{ReadBufferSize: 1024, WriteBufferSize: 1024, WriteBufferPool: &sync.Pool{}}
	msgs := []string{"ack", "delta", strings.Repeat("long reply ", 1000), "done"}
	var before, after int
	served := make(chan error, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &corkingWriter{ResponseWriter: w}
		conn, err := up.Upgrade(cw, r, nil)
		if err != nil {
			served <- err
			return
		}
		before = cl.count()
		cw.conn.cork()
		for _, m := range msgs {
			if err := conn.WriteMessage(websocket.TextMessage, []byte(m)); err != nil {
				served <- err
				return
			}
		}
		if cl.count() != before {
			served <- errors.New("a corked write reached the socket")
			return
		}
		err = cw.conn.uncork(time.Now().Add(5 * time.Second))
		after = cl.count()
		served <- err
	}))
	srv.Listener = cl
	srv.Start()
	defer srv.Close()

	client, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if after-before != 1 {
		t.Fatalf("the batch took %d writes, want 1", after-before)
	}
	for _, want := range msgs {
		_, got, err := client.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Fatalf("read %.20q…, want %.20q…", got, want)
		}
	}
}

// recordingConn is the socket under a corkConn: it records each write and
// fails them once told to.
type recordingConn struct {
	net.Conn
	writes [][]byte
	fail   error
}

func (c *recordingConn) Write(p []byte) (int, error) {
	if c.fail != nil {
		return 0, c.fail
	}
	c.writes = append(c.writes, bytes.Clone(p))
	return len(p), nil
}

func (c *recordingConn) SetWriteDeadline(time.Time) error { return nil }

func TestCorkConn(t *testing.T) {
	sock := &recordingConn{}
	c := &corkConn{Conn: sock}
	deadline := time.Now().Add(time.Second)

	// Uncorked, a write goes straight to the socket.
	c.Write([]byte("ping"))
	if len(sock.writes) != 1 || string(sock.writes[0]) != "ping" {
		t.Fatalf("uncorked write: %q", sock.writes)
	}
	// Uncorking with nothing held writes nothing.
	c.cork()
	if err := c.uncork(deadline); err != nil || len(sock.writes) != 1 {
		t.Fatalf("empty uncork: err %v, %d writes", err, len(sock.writes))
	}
	// Corked writes go out together, in order, on uncork.
	c.cork()
	for _, s := range []string{"a", "bb", "ccc"} {
		if n, err := c.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("corked write: %d, %v", n, err)
		}
	}
	if len(sock.writes) != 1 {
		t.Fatalf("corked writes reached the socket: %q", sock.writes)
	}
	if err := c.uncork(deadline); err != nil {
		t.Fatal(err)
	}
	if len(sock.writes) != 2 || string(sock.writes[1]) != "abbccc" {
		t.Fatalf("after uncork: %q", sock.writes)
	}
	// A cork holds at most corkFlushBytes before it writes anyway.
	c.cork()
	big := bytes.Repeat([]byte("x"), corkFlushBytes/2+1)
	c.Write(big)
	c.Write(big)
	if len(sock.writes) != 3 || len(sock.writes[2]) != 2*len(big) {
		t.Fatalf("a full cork did not write: %d writes", len(sock.writes))
	}
	c.Write([]byte("tail"))
	if err := c.uncork(deadline); err != nil || len(sock.writes) != 4 || string(sock.writes[3]) != "tail" {
		t.Fatalf("after a full cork: err %v, %d writes", err, len(sock.writes))
	}
	// The flush's failure is the batch's, and every later write fails.
	broken := errors.New("connection reset")
	sock.fail = broken
	c.cork()
	if _, err := c.Write([]byte("lost")); err != nil {
		t.Fatalf("a corked write failed before the flush: %v", err)
	}
	if err := c.uncork(deadline); !errors.Is(err, broken) {
		t.Fatalf("uncork: %v, want %v", err, broken)
	}
	sock.fail = nil
	if _, err := c.Write([]byte("after")); !errors.Is(err, broken) {
		t.Fatalf("a write after a failed flush: %v, want %v", err, broken)
	}
}
