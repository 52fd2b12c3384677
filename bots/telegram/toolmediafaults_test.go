package telegram

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/faults"
	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// TestToolMediaFaultAtEveryStep is the fault-at-every-step harness
// (sessions' TestFaultAtEveryStep) on the path of media from tools to a
// Telegram chat: two messages, each answered by a turn whose tool
// returned a picture and a document, the first picture's requests all
// answered 502 in its first delivery (so that its claim is released and
// a later delivery sends it). The scenario runs once clean, which counts
// its ledger calls (N), then once for every k in 1..N with a storage
// outage from the k-th call — before it reaches the database, and after
// it landed with its answer lost — healed once it has failed a few
// calls; the recovery pass delivers what the live delivery left.
//
// Storage is all that fails; Telegram takes or surely refuses every
// request. So nothing is left unsure, and every run ends with each file
// sent exactly once and marked delivered with what Telegram answered,
// and each reply's text sent once, with no line saying a file may not
// have arrived.
func TestToolMediaFaultAtEveryStep(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault-at-every-step harness runs in the full suite")
	}
	for _, pg := range []bool{false, true} {
		name := map[bool]string{false: "sqlite", true: "postgres"}[pg]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dsn := ""
			if pg {
				dsn = pgtest.DSN(t) // one schema, emptied for each run
			}
			clean := mediaFaultRun(t, dsn, 0, faults.Before)
			visited := map[string]int{}
			for _, mode := range []faults.Mode{faults.Before, faults.After} {
				for k := 1; k <= clean.calls; k++ {
					if only := os.Getenv("FAULT_K"); only != "" && only != strconv.Itoa(k) {
						continue
					}
					r := mediaFaultRun(t, dsn, k, mode)
					if r.struck != "" {
						visited[mode.String()+" "+r.struck]++
					}
					if t.Failed() {
						t.Fatalf("outage from step %d (%s, %s): invariants broken; steps of the clean run: %s", k, mode, r.struck,
							strings.Join(clean.steps, ", "))
					}
				}
			}
			if os.Getenv("FAULT_K") == "" {
				for _, op := range []string{"ClaimMediaSend", "ReleaseMediaSend", "MarkMediaDelivered", "ToolMedia"} {
					for _, mode := range []faults.Mode{faults.Before, faults.After} {
						if visited[mode.String()+" "+op] == 0 {
							t.Errorf("no outage started at %s (%s); steps of the clean run: %s", op, mode, strings.Join(clean.steps, ", "))
						}
					}
				}
			}
			var kinds []string
			for k, v := range visited {
				kinds = append(kinds, fmt.Sprintf("%s×%d", k, v))
			}
			slices.Sort(kinds)
			t.Logf("tool media on %s: %d fault points visited (%d steps × before/after); struck first: %s", name, 2*clean.calls, clean.calls,
				strings.Join(kinds, ", "))
		})
	}
}

// mediaFaultRun runs the scenario once, on a fresh database (dsn's
// schema emptied, or a new SQLite file), with an outage from step k (none
// when k is 0), and checks the invariants.
func mediaFaultRun(t *testing.T, dsn string, k int, mode faults.Mode) faultRun {
	t.Helper()
	clock := clocktest.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s := mediaSetup(t)
	s.dsn, s.now = dsn, clock.Now
	withTools := s.manager
	s.manager = func(o *sessions.Options) {
		withTools(o)
		o.RetryPause = 5 * time.Millisecond
	}
	// The bot's waits between tries are short, not nothing: a storage
	// call made again waits out the outage as it would, in milliseconds.
	s.sleep = func(ctx context.Context, d time.Duration) error {
		select {
		case <-time.After(time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	api := telegramtest.New(t)
	// The first picture's first delivery: Telegram answers 502 to each
	// of its requests, and took nothing.
	api.FailBare("sendPhoto", http.StatusBadGateway, maxUploadAttempt)
	deliveries := notingDeliveries(&s)
	var fs *faults.Injector
	s.hook = func(db *store.DB) {
		if dsn != "" {
			var tables []string
			if err := db.Gorm().Raw("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()").Scan(&tables).Error; err != nil {
				t.Fatal(err)
			}
			if err := db.Gorm().Exec("TRUNCATE " + strings.Join(tables, ", ")).Error; err != nil {
				t.Fatal(err)
			}
		}
		fs = faults.New(db)
		if k > 0 {
			fs.Outage(k, mode)
		}
	}
	h := start(t, api, t.TempDir(), s)
	defer h.shutdown(5 * time.Second)
	var healed <-chan struct{} = closed
	if k > 0 {
		healed = fs.HealAfter(3, 500*time.Millisecond)
	}
	label := fmt.Sprintf("outage from step %d (%s)", k, mode)
	var msgs []int
	for i, text := range []string{"draw it", "and again"} {
		for len(deliveries) > 0 {
			<-deliveries // the deliveries of the message before
		}
		msg := api.Push(telegramtest.DM(7, text))
		msgs = append(msgs, msg)
		// The live delivery ends (or there is none: the turn is left to
		// the recovery pass), and the outage with it.
		select {
		case <-deliveries:
		case <-time.After(10 * time.Second):
		}
		<-healed
		// Then the recovery pass, a minute apart on the clock, until the
		// reply is sent: a write the outage failed is retried in the
		// background meanwhile (the turn stays held until it lands).
		deadline := time.Now().Add(30 * time.Second)
		for pass := 0; len(replyTexts(api, msg)) == 0; pass++ {
			if time.Now().After(deadline) {
				var turns []ledger.Message
				h.db.Gorm().Order("conversation_id, seq").Find(&turns)
				t.Errorf("%s: message %d (%q) never answered after %d recovery passes; sent: %+v; messages: %+v; media: %+v", label, i+1, text, pass,
					api.Messages(), turns, mediaRows(t, h))
				return mediaFaultEnd(fs, k)
			}
			clock.Advance(2 * time.Minute)
			if _, _, err := h.mgr.Rescuer().Recover(context.Background(), time.Hour); err != nil {
				t.Errorf("%s: recovery: %v", label, err)
			}
			api.WaitSentWithin(len(api.Messages())+1, 100*time.Millisecond)
		}
	}
	// Once, whole: each message's answer and files, counted at the end
	// (a second send of the first, during the second's turn, counts).
	for i, msg := range msgs {
		replies := replyTexts(api, msg)
		if len(replies) != 1 || !strings.HasPrefix(replies[0], "answer: a chart and its report") || strings.Contains(replies[0], "may not have arrived") ||
			strings.Contains(replies[0], "could not be sent") {
			t.Errorf("%s: message %d answered %q, want one answer with no line of a file's fate", label, i+1, replies)
		}
		files := map[string]int{}
		for _, u := range api.Uploads() {
			if u.ReplyTo == msg {
				files[u.Method]++
			}
		}
		if files["sendPhoto"] != 1 || files["sendDocument"] != 1 || len(files) != 2 {
			t.Errorf("%s: message %d's files sent: %v, want one sendPhoto and one sendDocument", label, i+1, files)
		}
	}
	// Each item marked delivered with the message Telegram made of it.
	refs := map[string]bool{}
	for _, u := range api.Uploads() {
		refs[strconv.Itoa(u.MessageID)] = true
	}
	rows := mediaRows(t, h)
	if len(rows) != 4 {
		t.Errorf("%s: %d media rows, want 4", label, len(rows))
	}
	for _, r := range rows {
		if r.DeliveredAt == nil || !refs[r.DeliveryRef] || r.SendingAt == nil {
			t.Errorf("%s: media %s (%s) marked %q at %v, claimed at %v: want delivered as one of the messages sent", label, r.ID, r.Kind,
				r.DeliveryRef, r.DeliveredAt, r.SendingAt)
		}
	}
	if t.Failed() {
		t.Logf("%s: steps: %s", label, strings.Join(fs.Steps(), ", "))
	}
	return mediaFaultEnd(fs, k)
}

// mediaFaultEnd is what a run of the media harness saw.
func mediaFaultEnd(fs *faults.Injector, k int) faultRun {
	steps := fs.Steps()
	struck := ""
	if k > 0 && k <= len(steps) {
		struck = steps[k-1]
	}
	return faultRun{calls: fs.Calls(), steps: steps, struck: struck}
}

// faultRun is what one run of a fault harness saw: its counted ledger
// calls, their names, and the call its outage started at.
type faultRun struct {
	calls  int
	steps  []string
	struck string
}

// notingDeliveries has s's bot tell each delivery it records on the
// channel returned (room for 64).
func notingDeliveries(s *setup) chan string {
	deliveries := make(chan string, 64)
	s.sess = func(m *sessions.Manager) Sessions {
		sess := SessionsOf(m)
		sess.Deliveries = deliveryNotes{Manager: m, ch: deliveries}
		return sess
	}
	return deliveries
}

// closed is a channel closed from the start.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// replyTexts are the texts sent in reply to message id.
func replyTexts(api *telegramtest.Server, id int) []string {
	var out []string
	for _, s := range api.Messages() {
		if s.ReplyTo == id {
			out = append(out, s.Text)
		}
	}
	return out
}

// Storage away past a file's wait, from its first claim: the delivery
// makes the claim mediaStoreTries times and gives up, the text waits,
// and once storage is back the next delivery settles the file by where
// its claim stands — never reached the database (before): sent once, no
// note; landed with its answers lost (after): taken as cut off, not sent,
// and the text says it may not have arrived.
func TestToolMediaStorageAwayPastTheWait(t *testing.T) {
	for _, mode := range []faults.Mode{faults.Before, faults.After} {
		t.Run(mode.String(), func(t *testing.T) {
			// Where the first claim comes: a clean run's steps.
			clean := mediaFaultRun(t, "", 0, faults.Before)
			k := slices.Index(clean.steps, "ClaimMediaSend") + 1
			if k == 0 {
				t.Fatalf("no claim in the clean run: %v", clean.steps)
			}
			clock := clocktest.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			s := mediaSetup(t)
			s.now = clock.Now
			s.sleep = func(ctx context.Context, d time.Duration) error { return nil }
			deliveries := notingDeliveries(&s)
			var fs *faults.Injector
			s.hook = func(db *store.DB) {
				fs = faults.New(db)
				fs.Outage(k, mode)
			}
			api := telegramtest.New(t)
			api.FailBare("sendPhoto", http.StatusBadGateway, maxUploadAttempt) // as in the clean run
			h := start(t, api, t.TempDir(), s)
			msg := api.Push(telegramtest.DM(7, "draw it"))
			select {
			case <-deliveries: // the live delivery gave up
			case <-time.After(30 * time.Second):
				t.Fatal("the live delivery never ended")
			}
			if n := fs.Count("ClaimMediaSend"); n != mediaStoreTries {
				t.Fatalf("the claim was made %d times, want %d", n, mediaStoreTries)
			}
			if n := len(api.Uploads()) + len(replyTexts(api, msg)); n != 0 {
				t.Fatalf("%d sends while storage was away", n)
			}
			fs.Heal()
			deadline := time.Now().Add(30 * time.Second)
			for len(replyTexts(api, msg)) == 0 && time.Now().Before(deadline) {
				clock.Advance(2 * time.Minute)
				if _, _, err := h.mgr.Rescuer().Recover(context.Background(), time.Hour); err != nil {
					t.Fatal(err)
				}
				api.WaitSentWithin(1, 100*time.Millisecond)
			}
			replies := replyTexts(api, msg)
			photos := uploadCount(api)["sendPhoto"]
			const note = "(a picture may not have arrived: sending it was cut off.)"
			switch {
			case len(replies) != 1:
				t.Fatalf("answers: %q, want one", replies)
			case mode == faults.Before && (photos != 1 || strings.Contains(replies[0], note)):
				t.Fatalf("claim never stored: %d photos sent, answer %q; want one photo, no note", photos, replies[0])
			case mode == faults.After && (photos != 0 || !strings.HasSuffix(replies[0], note)):
				t.Fatalf("claim stored, answers lost: %d photos sent, answer %q; want none, and the note", photos, replies[0])
			}
		})
	}
}
