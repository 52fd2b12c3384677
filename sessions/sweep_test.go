package sessions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
	"github.com/chatgate/chatgate/sessions/storetest"
)

// seedConversations stores n active websocket conversations that started
// and were last active at the given time, each with one message.
func seedConversations(t *testing.T, db *store.DB, prefix string, n int, at time.Time) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		c := &Conversation{ID: fmt.Sprintf("%s-%03d", prefix, i), SessionKey: fmt.Sprintf("websocket:%s-%d", prefix, i), Channel: "websocket",
			Status: StatusActive, StartedAt: at, LastActivityAt: at}
		if err := db.CreateConversation(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		if err := db.Append(context.Background(), ledger.Append{Conv: c, Messages: []Message{{ConversationID: c.ID, Seq: 1, Role: agent.RoleUser, Content: "hi", Status: MsgOK, CreatedAt: at}}, At: at}); err != nil {
			t.Fatal(err)
		}
		ids[i] = c.ID
	}
	return ids
}

func TestSweepArchivesInChunks(t *testing.T) {
	storetest.DriversWith(t, store.OpenOptions{Chunk: 3}, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
		due := seedConversations(t, db, "due", 7, c.Now().Add(-2*time.Hour))
		seedConversations(t, db, "fresh", 2, c.Now().Add(-10*time.Minute))
		m := newManager(t, db, agent.Echo{}, c, map[string]Policy{"websocket": {MaxHistory: 10, Reset: ResetPolicy{Mode: ResetIdle, IdleFor: time.Hour}}})
		var got []string
		m.Routes().Register("websocket", Route{Reset: func(e ResetEvent) { got = append(got, e.OldConversation) }})

		if n, err := NewSweeper(m, nil).SweepIdle(context.Background()); err != nil || n != 7 {
			t.Fatalf("idle sweep archived %d (%v), want 7 in chunks of 3", n, err)
		}
		sort.Strings(got)
		if fmt.Sprint(got) != fmt.Sprint(due) {
			t.Fatalf("reset events for %v, want %v", got, due)
		}
		if n, err := NewSweeper(m, nil).SweepIdle(context.Background()); err != nil || n != 0 {
			t.Fatalf("repeated sweep archived %d (%v)", n, err)
		}
		var active int64
		db.Gorm().Model(&Conversation{}).Where("status = ?", StatusActive).Count(&active)
		if active != 2 {
			t.Fatalf("%d active conversations, want the 2 fresh ones", active)
		}
		for _, id := range due {
			conv, _ := db.Conversation(context.Background(), id)
			if conv.Status != StatusArchived || conv.ResetReason != ReasonIdle || conv.ArchivedAt == nil || !conv.ArchivedAt.Equal(c.Now()) {
				t.Fatalf("swept conversation %+v", conv)
			}
			if len(transcript(t, db, id)) != 1 {
				t.Fatalf("conversation %s lost its messages", id)
			}
		}
	})
}

func TestPurgeDeletesOnlyOldArchivedConversations(t *testing.T) {
	storetest.DriversWith(t, store.OpenOptions{Chunk: 2}, func(t *testing.T, open func() *store.DB) {
		db := open()
		ctx := context.Background()
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		old := seedConversations(t, db, "old", 5, start)
		recent := seedConversations(t, db, "recent", 2, start)
		active := seedConversations(t, db, "active", 2, start)
		for i, id := range append(old, recent...) {
			at := start.AddDate(0, 0, 1) // old: archived on day 1
			if i >= len(old) {
				at = start.AddDate(0, 0, 20)
			}
			if ok, err := db.Archive(ctx, id, ReasonManual, at, -1); !ok || err != nil {
				t.Fatalf("archive %s: %v %v", id, ok, err)
			}
		}
		n, err := db.Purge(ctx, start.AddDate(0, 0, 10))
		if err != nil || n != int64(len(old)) {
			t.Fatalf("purge deleted %d (%v), want %d", n, err, len(old))
		}
		for _, id := range old {
			if conv, _ := db.Conversation(ctx, id); conv != nil {
				t.Fatalf("purged conversation %s is still there", id)
			}
			if len(transcript(t, db, id)) != 0 {
				t.Fatalf("purged conversation %s left messages", id)
			}
		}
		for _, id := range append(recent, active...) {
			if conv, _ := db.Conversation(ctx, id); conv == nil || len(transcript(t, db, id)) != 1 {
				t.Fatalf("conversation %s (recent or active) was purged", id)
			}
		}
		if n, err := db.Purge(ctx, start.AddDate(0, 0, 10)); n != 0 || err != nil {
			t.Fatalf("repeated purge deleted %d (%v)", n, err)
		}
	})
}

// A sweep commits chunk by chunk: a turn that arrives while it runs is
// stored between two chunks, not after the whole sweep.
func TestTurnsCommitBetweenSweepChunks(t *testing.T) {
	storetest.DriversWith(t, store.OpenOptions{Chunk: 2}, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
		seedConversations(t, db, "due", 5, c.Now().Add(-2*time.Hour))
		m := newManager(t, db, agent.Echo{}, c, map[string]Policy{"websocket": {MaxHistory: 10, Reset: ResetPolicy{Mode: ResetIdle, IdleFor: time.Hour}}})
		var (
			events   int
			archived int64 = -1
			turnErr  error
		)
		m.Routes().Register("websocket", Route{Reset: func(ResetEvent) {
			events++
			if events != 1 {
				return
			}
			// The first chunk has committed; the sweep waits for this
			// callback before it queues the next chunk.
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, turnErr = m.Handle(context.Background(), msg("websocket:newcomer", "hi"), Hooks{})
				db.Gorm().Model(&Conversation{}).Where("status = ?", StatusArchived).Count(&archived)
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Error("a turn waited for the whole sweep")
			}
		}})
		if n, err := NewSweeper(m, nil).SweepIdle(context.Background()); err != nil || n != 5 {
			t.Fatalf("sweep archived %d (%v), want 5", n, err)
		}
		if turnErr != nil || archived != 2 {
			t.Fatalf("turn during the sweep: err %v, %d conversations archived when it was stored; want nil, 2 (one chunk)", turnErr, archived)
		}
		if rows := transcript(t, db, conversations(t, db, "websocket:newcomer")[0].ID); len(rows) != 2 {
			t.Fatalf("the newcomer's turn stored %d rows, want 2", len(rows))
		}
	})
}

// sweepResult is what a scheduled sweep returned.
type sweepResult struct {
	n   int
	err error
}

// A sweep running when the drain's deadline passes stops at its next
// chunk: what it committed stays, the rest waits for the next run, and
// Shutdown returns once the sweep has stopped, within its grace.
func TestShutdownStopsASweepAtItsNextChunk(t *testing.T) {
	storetest.DriversWith(t, store.OpenOptions{Chunk: 2}, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
		seedConversations(t, db, "due", 10, c.Now().Add(-2*time.Hour))
		idle := map[string]Policy{"websocket": {MaxHistory: 10, Reset: ResetPolicy{Mode: ResetIdle, IdleFor: time.Hour}}}
		logs := &logWatch{lines: make(chan string, 64)}
		m := New(db, agent.Echo{}, Options{Policies: idle, Now: c.Now, Logger: slog.New(logs)})
		inChunk, release := make(chan struct{}), make(chan struct{})
		var events atomic.Int32
		m.Routes().Register("websocket", Route{Reset: func(ResetEvent) {
			if events.Add(1) == 1 {
				close(inChunk) // the first chunk has committed
				<-release
			}
		}})
		swept := make(chan sweepResult, 1)
		go func() { n, err := NewSweeper(m, nil).RunSweep("idle"); swept <- sweepResult{n, err} }()
		<-inChunk

		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second)) // the drain's deadline has passed
		defer cancel()
		stopped := make(chan error, 1)
		go func() { stopped <- m.Shutdown(ctx) }()
		// Shutdown tells once it has cancelled what still runs.
		for interrupted := false; !interrupted; {
			select {
			case line := <-logs.lines:
				interrupted = strings.HasPrefix(line, "drain deadline passed")
			case err := <-stopped:
				t.Fatalf("Shutdown returned (%v) while a sweep was running", err)
			}
		}
		close(release)
		if err := <-stopped; err != nil {
			t.Fatalf("Shutdown = %v; want nil: the sweep stops at its next chunk, within the grace", err)
		}
		r := <-swept
		if !errors.Is(r.err, context.Canceled) || r.n != 2 {
			t.Fatalf("sweep returned %d, %v; want 2 (one chunk), context.Canceled", r.n, r.err)
		}
		var archived int64
		db.Gorm().Model(&Conversation{}).Where("status = ?", StatusArchived).Count(&archived)
		if archived != 2 || events.Load() != 2 {
			t.Fatalf("%d archived, %d reset events; want the first chunk's 2", archived, events.Load())
		}
		if n, err := NewSweeper(m, nil).RunSweep("idle"); !errors.Is(err, ErrShuttingDown) || n != 0 {
			t.Fatalf("sweep after Shutdown = %d, %v; want ErrShuttingDown", n, err)
		}

		// The next start's sweep archives the rest. On PostgreSQL the cut
		// sweep's advisory lock (a transaction's) is let go when the server
		// ends that transaction, which follows the cancel asynchronously; a
		// sweep that finds it held does nothing, as when another replica
		// sweeps — so it is tried again until it holds it.
		next := newManager(t, db, agent.Echo{}, c, idle)
		total := 0
		for deadline := time.Now().Add(10 * time.Second); total == 0; time.Sleep(20 * time.Millisecond) {
			n, err := NewSweeper(next, nil).RunSweep("idle")
			if err != nil {
				t.Fatal(err)
			}
			total += n
			if total == 0 && time.Now().After(deadline) {
				break
			}
		}
		if total != 8 {
			t.Fatalf("next sweep archived %d, want the other 8", total)
		}
	})
}

// Within the drain's deadline Shutdown lets a running sweep finish.
func TestShutdownLetsASweepFinishBeforeTheDeadline(t *testing.T) {
	storetest.DriversWith(t, store.OpenOptions{Chunk: 2}, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
		seedConversations(t, db, "due", 10, c.Now().Add(-2*time.Hour))
		m := newManager(t, db, agent.Echo{}, c, map[string]Policy{"websocket": {MaxHistory: 10, Reset: ResetPolicy{Mode: ResetIdle, IdleFor: time.Hour}}})
		inChunk, release := make(chan struct{}), make(chan struct{})
		var events atomic.Int32
		m.Routes().Register("websocket", Route{Reset: func(ResetEvent) {
			if events.Add(1) == 1 {
				close(inChunk)
				<-release
			}
		}})
		swept := make(chan sweepResult, 1)
		go func() { n, err := NewSweeper(m, nil).RunSweep("idle"); swept <- sweepResult{n, err} }()
		<-inChunk

		stopped := make(chan error, 1)
		go func() { stopped <- m.Shutdown(context.Background()) }()
		<-m.life.draining.Done() // the drain has begun
		close(release)
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		var archived int64
		db.Gorm().Model(&Conversation{}).Where("status = ?", StatusArchived).Count(&archived)
		if archived != 10 || events.Load() != 10 {
			t.Fatalf("after Shutdown: %d archived, %d reset events; want all 10", archived, events.Load())
		}
		if r := <-swept; r.err != nil || r.n != 10 {
			t.Fatalf("sweep returned %d, %v; want 10, nil", r.n, r.err)
		}
	})
}

// logWatch is a slog handler that hands each record's message to a test.
type logWatch struct{ lines chan string }

func (l *logWatch) Enabled(context.Context, slog.Level) bool { return true }
func (l *logWatch) Handle(_ context.Context, r slog.Record) error {
	select {
	case l.lines <- r.Message:
	default:
	}
	return nil
}
func (l *logWatch) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logWatch) WithGroup(string) slog.Handler      { return l }

// The idle sweep finds conversations by the minute of their last activity
// and then by the time itself: around a cutoff inside a minute, it archives
// exactly those idle since the cutoff, on either side of the minute's
// start, and none active after it in the same minute. The retention reader
// (IdleActive, strictly before its cutoff) reads the same range. The
// manager stores times in UTC; a cutoff may come in any zone.
func TestIdleSweepAtTheMinute(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		ctx := context.Background()
		cutoff := time.Date(2026, 3, 10, 12, 0, 30, 500_000_000, time.UTC)
		last := map[string]time.Time{
			"a-earlier-minute": time.Date(2026, 3, 10, 11, 59, 59, 999_999_000, time.UTC),
			"b-minute-start":   time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC),
			"c-at-cutoff":      cutoff,
			"d-after-cutoff":   cutoff.Add(time.Microsecond),
			"e-minute-end":     time.Date(2026, 3, 10, 12, 0, 59, 999_999_000, time.UTC),
			"f-next-minute":    time.Date(2026, 3, 10, 12, 1, 0, 0, time.UTC),
		}
		for id, at := range last {
			c := &Conversation{ID: id, SessionKey: "websocket:" + id, Channel: "websocket", Status: StatusActive, StartedAt: at, LastActivityAt: at}
			if err := db.CreateConversation(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		idle, err := db.IdleActive(ctx, "websocket", "websocket:", cutoff.In(time.FixedZone("UTC-3", -3*3600)), 100)
		var ids []string
		for _, c := range idle {
			ids = append(ids, c.ID)
		}
		slices.Sort(ids)
		if want := []string{"a-earlier-minute", "b-minute-start"}; err != nil || !slices.Equal(ids, want) {
			t.Errorf("idle before the cutoff: %v (%v), want %v", ids, err, want)
		}
		var archived []string
		n, err := db.SweepIdle(ctx, "websocket", cutoff.In(time.FixedZone("UTC-3", -3*3600)), cutoff, func(a []ledger.Archived) {
			for _, c := range a {
				archived = append(archived, c.ID)
			}
		})
		slices.Sort(archived)
		if want := []string{"a-earlier-minute", "b-minute-start", "c-at-cutoff"}; err != nil || n != 3 || !slices.Equal(archived, want) {
			t.Errorf("idle sweep archived %d %v (%v), want %v", n, archived, err, want)
		}
	})
}
