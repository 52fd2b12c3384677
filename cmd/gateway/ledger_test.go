package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// countingLLM speaks the chat-completions streaming format and counts the
// requests it gets per input and how many run at once. Inputs containing
// "slow" hang after their first piece until released; with delay set,
// every answer takes that long.
type countingLLM struct {
	mu       sync.Mutex
	cond     *sync.Cond
	byInput  map[string]int
	total    int
	inFlight int
	most     int
	released bool
	delay    time.Duration
}

func newCountingLLM() *countingLLM {
	l := &countingLLM{byInput: map[string]int{}}
	l.cond = sync.NewCond(&l.mu)
	return l
}

func (l *countingLLM) release() {
	l.mu.Lock()
	l.released = true
	l.cond.Broadcast()
	l.mu.Unlock()
}

// setDelay makes every later answer take d, and starts counting anew how
// many run at once.
func (l *countingLLM) setDelay(d time.Duration) {
	l.mu.Lock()
	l.delay = d
	l.most = l.inFlight
	l.mu.Unlock()
}

// waitInFlight waits until n requests are running at once.
func (l *countingLLM) waitInFlight(t *testing.T, n int) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		l.mu.Lock()
		for l.inFlight < n {
			l.cond.Wait()
		}
		l.mu.Unlock()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		l.mu.Lock()
		defer l.mu.Unlock()
		t.Fatalf("%d model requests running, want %d", l.inFlight, n)
	}
}

func (l *countingLLM) counts() (total int, byInput map[string]int, most int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	byInput = map[string]int{}
	for k, v := range l.byInput {
		byInput[k] = v
	}
	return l.total, byInput, l.most
}

func (l *countingLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	input := modelInput(r)
	l.mu.Lock()
	l.byInput[input]++
	l.total++
	l.inFlight++
	l.most = max(l.most, l.inFlight)
	delay := l.delay
	l.cond.Broadcast()
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.inFlight--
		l.cond.Broadcast()
		l.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	chunk := func(s string) { streamChunk(w, s) }
	chunk("thinking about " + input + "... ")
	if strings.Contains(input, "slow") {
		released := make(chan struct{})
		go func() {
			l.mu.Lock()
			for !l.released && r.Context().Err() == nil {
				l.cond.Wait()
			}
			l.mu.Unlock()
			close(released)
		}()
		stop := context.AfterFunc(r.Context(), func() { l.mu.Lock(); l.cond.Broadcast(); l.mu.Unlock() })
		defer stop()
		<-released
		if r.Context().Err() != nil {
			return
		}
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	chunk("done")
	streamEnd(w)
}

// metric reads one unlabelled counter from a gateway's /metrics.
func metric(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}

// eventually waits (at most a minute) until cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func stopGateway(t *testing.T, p *process) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, p.stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("no exit after SIGTERM\n%s", p.stderr.String())
	}
}

// userTranscript returns the active conversation's messages of a key.
func userTranscript(t *testing.T, db *store.DB, key string) []sessions.Message {
	t.Helper()
	convs, err := db.ListConversations(context.Background(), store.ListFilter{SessionKey: key})
	if err != nil || len(convs) != 1 {
		t.Fatalf("conversations of %s: %d, %v", key, len(convs), err)
	}
	msgs, err := db.MessagesAfter(context.Background(), convs[0].ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// replicaConfig is a gateway on PostgreSQL and an OpenAI-compatible model
// server; channels adds channel sections below the WebSocket one.
func replicaConfig(addr, dsn, llmURL, drain, channels string) string {
	return fmt.Sprintf(`
gateway:
  listen: %s
storage:
  driver: postgres
  dsn: %q
agent:
  backend: openai
  openai: {base_url: %s/v1, model: m, max_retries: 0}
channels:
  websocket:
    rate_limit: {per_second: 1000, burst: 1000}
%s
shutdown:
  drain_timeout: %s
log:
  level: warn
`, addr, dsn, llmURL, channels, drain)
}

// A rolling deploy: replica A runs 20 slow turns; replica B starts while
// they run and claims none of them; A is stopped, stores them interrupted,
// and B runs each of them once more and answers it.
func TestRollingDeployRunsEachTurnOnce(t *testing.T) {
	dsn := pgtest.DSN(t)
	llm := newCountingLLM()
	llmSrv := httptest.NewServer(llm)
	defer llmSrv.Close()
	addrA, addrB := freeAddr(t), freeAddr(t)
	a := startGateway(t, t.TempDir(), replicaConfig(addrA, dsn, llmSrv.URL, "1s", ""))
	waitHealthy(t, "http://"+addrA)
	const users = 20
	for i := range users {
		cl, _ := dialClient(t, addrA, map[string]any{"user": fmt.Sprintf("u%02d", i)})
		cl.c.WriteJSON(map[string]any{"type": "message", "id": "m1", "text": fmt.Sprintf("slow %02d", i)})
		cl.next(t, "ack")
	}
	llm.waitInFlight(t, users)

	startGateway(t, t.TempDir(), replicaConfig(addrB, dsn, llmSrv.URL, "1s", ""))
	waitHealthy(t, "http://"+addrB)
	// B's rescuer has looked at the ledger twice: A's turns are held.
	eventually(t, "two recovery passes on B", func() bool { return metric(t, addrB, "chatgate_recovery_passes_total") >= 2 })
	if total, _, _ := llm.counts(); total != users {
		t.Fatalf("%d model requests after B started, want %d: B ran turns A holds", total, users)
	}

	stopGateway(t, a) // drain_timeout 1s: the 20 are interrupted
	llm.release()
	db, err := store.Open(context.Background(), "postgres", dsn, store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	eventually(t, "B answers A's interrupted turns", func() bool {
		for i := range users {
			msgs := userTranscript(t, db, fmt.Sprintf("websocket:u%02d", i))
			if len(msgs) < 3 {
				return false
			}
		}
		return true
	})
	_, byInput, _ := llm.counts()
	for i := range users {
		key, input := fmt.Sprintf("websocket:u%02d", i), fmt.Sprintf("slow %02d", i)
		msgs := userTranscript(t, db, key)
		if len(msgs) != 3 || msgs[1].Status != sessions.MsgInterrupted || msgs[2].Status != sessions.MsgOK ||
			msgs[2].Content != "thinking about "+input+"... done" || msgs[2].ReplyTo != 1 {
			t.Fatalf("%s: %+v; want the message, A's interrupted reply, B's answer", key, msgs)
		}
		if byInput[input] != 2 {
			t.Fatalf("%q ran %d times, want 2 (interrupted on A, answered on B)", input, byInput[input])
		}
	}
}

// PostgreSQL refuses connections for 4 s while 10 Telegram turns stream:
// every message is answered exactly once, no reply is sent before it is
// stored, nothing runs again after a restart, and no session lease is left
// behind.
func TestDatabaseOutageAnswersEachMessageOnce(t *testing.T) {
	dsn := pgtest.DSN(t)
	proxy := pgtest.StartProxy(t, dsn)
	proxied := proxy.DSN

	api := telegramtest.New(t)
	apiSrv := httptest.NewServer(api)
	defer apiSrv.Close()
	llm := newCountingLLM()
	llmSrv := httptest.NewServer(llm)
	defer llmSrv.Close()
	addr := freeAddr(t)
	config := replicaConfig(addr, proxied, llmSrv.URL, "5s", fmt.Sprintf(`  telegram:
    token: %q
    api_url: %s
    poll_timeout: 1s`, telegramtest.Token, apiSrv.URL))
	dir := t.TempDir()
	p := startGateway(t, dir, config)
	waitHealthy(t, "http://"+addr)
	const users = 10
	ids := map[int]string{}
	for i := 1; i <= users; i++ {
		text := fmt.Sprintf("slow %d", i)
		ids[api.Push(telegramtest.DM(int64(i), text))] = text
	}
	llm.waitInFlight(t, users) // every message stored and claimed

	proxy.Cut()
	llm.release() // the turns end during the outage
	eventually(t, "a reply failing to store", func() bool {
		return strings.Contains(p.stderr.String(), "storing reply failed; kept and retried until storage answers")
	})
	time.Sleep(4 * time.Second) // the outage
	if n := len(api.Messages()); n != 0 {
		t.Fatalf("%d replies sent while the database was down: a reply went out before it was stored", n)
	}
	proxy.Heal(t)
	api.WaitSent(t, users)

	stopGateway(t, p)
	p2 := startGateway(t, dir, config)
	waitHealthy(t, "http://"+addr)
	// The restarted gateway's rescuer has looked, and a later message is
	// answered: whatever would run twice has had its chance.
	eventually(t, "a recovery pass", func() bool { return metric(t, addr, "chatgate_recovery_passes_total") >= 1 })
	last := api.Push(telegramtest.DM(1, "after"))
	api.WaitSent(t, users+1)

	answers := map[int][]string{}
	for _, m := range api.Messages() {
		answers[m.ReplyTo] = append(answers[m.ReplyTo], m.Text)
	}
	for id, text := range ids {
		if got := answers[id]; len(got) != 1 || got[0] != "thinking about "+text+"... done" {
			t.Errorf("%q answered %q, want it exactly once", text, got)
		}
	}
	if got := answers[last]; len(got) != 1 {
		t.Errorf("message after the restart answered %q", got)
	}
	_, byInput, _ := llm.counts()
	for _, text := range ids {
		if byInput[text] != 1 {
			t.Errorf("%q ran %d times, want 1", text, byInput[text])
		}
	}
	db, err := store.Open(context.Background(), "postgres", dsn, store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	eventually(t, "no session lease left", func() bool {
		var n int64
		db.Gorm().Raw("SELECT count(*) FROM session_leases").Scan(&n)
		return n == 0
	})
	stopGateway(t, p2)
}

// Fifty turns a stop interrupted are recovered side by side
// (recovery.concurrency, 16 by default) against a model that takes 2 s.
func TestFiftyInterruptedTurnsAreRecoveredInParallel(t *testing.T) {
	llm := newCountingLLM()
	llmSrv := httptest.NewServer(llm)
	defer llmSrv.Close()
	dir := t.TempDir()
	addr := freeAddr(t)
	config := fmt.Sprintf(`
gateway:
  listen: %s
agent:
  backend: openai
  openai: {base_url: %s/v1, model: m, max_retries: 0}
channels:
  websocket:
    rate_limit: {per_second: 1000, burst: 1000}
shutdown:
  drain_timeout: 0s
log:
  level: warn
`, addr, llmSrv.URL)
	p := startGateway(t, dir, config)
	waitHealthy(t, "http://"+addr)
	const users = 50
	for i := range users {
		cl, _ := dialClient(t, addr, map[string]any{"user": fmt.Sprintf("u%02d", i)})
		cl.c.WriteJSON(map[string]any{"type": "message", "id": "m1", "text": fmt.Sprintf("slow %02d", i)})
		cl.next(t, "ack")
	}
	llm.waitInFlight(t, users)
	stopGateway(t, p)

	llm.setDelay(2 * time.Second)
	llm.release()
	started := time.Now()
	startGateway(t, dir, config)
	waitHealthy(t, "http://"+addr)
	eventually(t, "a recovery pass", func() bool { return metric(t, addr, "chatgate_recovery_passes_total") >= 1 })
	took := time.Since(started)
	total, _, most := llm.counts()
	if total != 2*users || most < 16 {
		t.Fatalf("%d model requests, at most %d at once; want %d, 16", total, most, 2*users)
	}
	t.Logf("50 interrupted turns against a 2 s model recovered in %s, %d at once", took.Round(100*time.Millisecond), most)
	db, err := store.Open(context.Background(), "sqlite", dir+"/gateway.db", store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := range users {
		msgs := userTranscript(t, db, fmt.Sprintf("websocket:u%02d", i))
		if len(msgs) != 3 || msgs[2].Status != sessions.MsgOK {
			t.Fatalf("u%02d: %+v", i, msgs)
		}
	}
}
