package gateway

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/faults"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// delayEnv serves the WebSocket channel over a store whose calls the test
// can fail, on a fake clock, with the agent held by a gate.
func delayEnv(t *testing.T) (*env, *faults.Injector, *clocktest.Clock, *gate) {
	t.Helper()
	db, err := store.Open(context.Background(), store.DriverSQLite, filepath.Join(t.TempDir(), "g.db"), store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fs := faults.New(db)
	clock := clocktest.New(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	g := newGate()
	mgr := sessions.New(db, g, sessions.Options{Logger: quiet, Now: clock.Now, After: clock.After,
		RetryPause: 5 * time.Millisecond, DelayNotice: 20 * time.Second})
	e := serveEnv(t, db, mgr, WSOptions{}, false)
	t.Cleanup(fs.Heal) // (before the shutdown, when the test fails early)
	return e, fs, clock, g
}

// A stored message whose reply waits on the database past the delay
// notice gets one notice frame naming it; its reply follows once the
// database is back.
func TestDelayedNoticeFrame(t *testing.T) {
	e, fs, clock, g := delayEnv(t)
	c, _ := e.connect(map[string]any{"user": "di"})
	c.send(map[string]any{"type": "message", "id": "m1", "text": "slow"})
	c.expect("ack")
	<-g.started
	fs.Outage(fs.Calls()+1, faults.Before)
	close(g.release)                   // the reply's store fails, and is retried
	fs.WaitFailures(2, 10*time.Second) // retried: the wait is counted from the first
	clock.Advance(21 * time.Second)
	f := c.expect("notice")
	if f["code"] != "delayed" || f["id"] != "m1" || f["message"] != sessions.DelayText {
		t.Fatalf("notice = %v", f)
	}
	clock.Advance(time.Minute)
	fs.WaitFailures(fs.Failures()+2, 10*time.Second)
	fs.Heal()
	if f := c.expect("reply"); f["reply_to"] != "m1" || f["text"] != "echo: slow (history: 0)" {
		t.Fatalf("reply = %v", f)
	}
	// Nothing more about m1: the next message's reply comes next.
	c.send(map[string]any{"type": "message", "id": "m2", "text": "next"})
	if f := c.expect("reply"); f["reply_to"] != "m2" {
		t.Fatalf("after the reply: %v", f)
	}
}

// The web page through an outage: the message waiting on the database is
// marked and its user told once; a message sent while the database
// refuses it is said to have failed, kept and sent again by the page until
// it is stored; both are answered once the database is back.
func TestWebPageThroughADatabaseOutage(t *testing.T) {
	e, fs, clock, g := delayEnv(t)
	ctx := browser(t)
	err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/?user=ola"),
		waitText("#status", "online as ola"),
		sendText("slow"),
		waitJS(`document.querySelectorAll('.msg.user.waiting').length === 1`),
	)
	if err != nil {
		t.Fatal(err)
	}
	<-g.started
	fs.Outage(fs.Calls()+1, faults.Before)
	close(g.release)
	fs.WaitFailures(2, 10*time.Second) // retried: the wait is counted from the first
	clock.Advance(21 * time.Second)
	err = chromedp.Do(ctx,
		waitJS(`document.querySelectorAll('.msg.user.delayed').length === 1`),
		waitText(".notice", "can't reach my storage"),
		sendText("during"),
		// Refused by the database: told, kept pending, and sent again.
		waitText(".notice", "could not be stored"),
		waitJS(`JSON.parse(localStorage.getItem('chatgate.pending')).length === 1`),
	)
	if err != nil {
		t.Fatal(err)
	}
	fs.Heal()
	err = chromedp.Do(ctx,
		waitText(".msg.assistant", "echo: slow (history: 0)"),
		waitText(".msg.assistant", "echo: during"),
		waitJS(`localStorage.getItem('chatgate.pending') === '[]'`),
		waitJS(`document.querySelectorAll('.msg.user.delayed, .msg.user.pending, .msg.user.waiting').length === 0`),
	)
	if err != nil {
		t.Fatal(err)
	}
	notices, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('.notice')).map(n => n.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	delays, refusals := 0, 0
	for _, n := range notices {
		switch {
		case n == sessions.DelayText:
			delays++
		case n != "":
			refusals++
		}
	}
	if delays != 1 || refusals != 1 {
		t.Fatalf("notices %q: want the delay notice once and the refusal once", notices)
	}
}
