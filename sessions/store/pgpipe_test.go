package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// TestPipelineErrors: only an error the server gave a statement (severity
// ERROR) counts as a refused pipeline, rolled back and worth running again
// append by append; a lost connection or a session the server ended
// (FATAL, perhaps after the commit) leaves it unknown whether it landed,
// and the append gets a commit error, never ErrStale or ErrDuplicate.
func TestPipelineErrors(t *testing.T) {
	p := &pgPipe{translate: func(err error) error {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return fmt.Errorf("%w: %w", gorm.ErrDuplicatedKey, err)
		}
		return err
	}}
	for _, c := range []struct {
		name    string
		err     error
		refused bool
		want    error
	}{
		{"guard", &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: pgCodeStale}, true, ledger.ErrStale},
		{"claim", &pgconn.PgError{Severity: "ERROR", Code: pgCodeLostClaim}, true, ledger.ErrLostClaim},
		{"duplicate", &pgconn.PgError{Severity: "ERROR", Code: "23505"}, true, gorm.ErrDuplicatedKey},
		{"session ended", &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: pgCodeStale}, false, nil},
		{"connection lost", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), false, nil},
	} {
		if got := refusal(c.err) != nil; got != c.refused {
			t.Errorf("%s: refused %v, want %v", c.name, got, c.refused)
		}
		got := p.appendError(c.err)
		if c.want != nil && !errors.Is(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		if c.want == nil && (errors.Is(got, ledger.ErrStale) || errors.Is(got, ledger.ErrLostClaim) || !errors.Is(got, c.err)) {
			t.Errorf("%s: %v, want a commit error", c.name, got)
		}
	}
}

// backendKiller is a pgx tracer that, once armed, has the server end the
// session of the next connection about to send a pipeline — as an
// administrator's pg_terminate_backend, a crash of that backend or a
// failover does — and waits until it is gone before the pipeline is sent.
type backendKiller struct {
	pipeTracer
	admin  *pgx.Conn
	armed  atomic.Bool
	killed atomic.Int32
	err    error
}

func (k *backendKiller) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if k.armed.CompareAndSwap(true, false) {
		var done bool
		// The second argument waits (in ms) until the backend has exited.
		k.err = k.admin.QueryRow(context.Background(), "SELECT pg_terminate_backend($1, 5000)", conn.PgConn().PID()).Scan(&done)
		if k.err == nil && !done {
			k.err = errors.New("the backend did not exit")
		}
		k.killed.Add(1)
	}
	return ctx
}

// TestPipelineWhoseBackendDies: when the server has ended the session of
// the connection a group commit's pipeline goes through, no append of it
// lands, each gets an uncertain commit error (never ErrStale, ErrLostClaim
// or ErrDuplicate, which would tell its caller something false about the
// conversation), and the store goes on over a new connection: the same
// appends, sent again, land once. (A session that ends after the server
// committed, its answer lost, is the fault harness's "after" outage.)
func TestPipelineWhoseBackendDies(t *testing.T) {
	dsn := postgresDSN(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(ctx) })
	killer := &backendKiller{admin: admin}
	db, err := Open(ctx, DriverPostgres, dsn, OpenOptions{Tracer: killer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	convs := createConversations(t, db, 3, now, "")
	appendAllOf := func() []error {
		release := holdWriter(db)
		errs := make([]error, len(convs))
		var wg sync.WaitGroup
		for i, c := range convs {
			client := fmt.Sprint("c-", i)
			a := ledger.Append{Conv: c, ExpectSeq: 0, RequireActive: true, At: now, Messages: []ledger.Message{{ConversationID: c.ID, Seq: 1,
				Role: "user", Content: "hello", ClientMsgID: &client, Status: ledger.MsgOK, CreatedAt: now,
				TurnState: ledger.TurnRunning, TurnOwner: "replica-1", TurnAttempt: 1, TurnLead: 1}}}
			wg.Go(func() { errs[i] = db.Append(ctx, a) })
		}
		for writesQueued(db) < len(convs) {
			waitQueue()
		}
		release()
		wg.Wait()
		return errs
	}

	killer.armed.Store(true)
	errs := appendAllOf()
	if killer.killed.Load() != 1 || killer.err != nil {
		t.Fatalf("backend killed %d times: %v", killer.killed.Load(), killer.err)
	}
	for i, err := range errs {
		if err == nil || errors.Is(err, ledger.ErrStale) || errors.Is(err, ledger.ErrLostClaim) || errors.Is(err, ledger.ErrDuplicate) ||
			!strings.Contains(err.Error(), "commit: ") {
			t.Errorf("append %d through a dead backend: %v, want an uncertain commit error", i, err)
		}
	}
	var stored int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM messages").Scan(&stored); err != nil || stored != 0 {
		t.Fatalf("%d messages stored by a pipeline whose backend was gone (%v), want none", stored, err)
	}
	for i, c := range convs {
		if c.LastSeq != 0 {
			t.Errorf("conversation %d advanced to %d in memory by a failed append", i, c.LastSeq)
		}
	}

	for i, err := range appendAllOf() {
		if err != nil {
			t.Errorf("append %d sent again: %v", i, err)
		}
	}
	for i := range convs {
		msgs, err := db.RecentMessages(ctx, convs[i].ID, 10)
		if err != nil || len(msgs) != 1 || convs[i].LastSeq != 1 {
			t.Errorf("conversation %d after the resend: %d messages, last seq %d, %v", i, len(msgs), convs[i].LastSeq, err)
		}
	}
}

// TestTurnUpdatesAreHeapOnly: on PostgreSQL a turn's update of its
// conversation changes no indexed column while the minute of its last
// activity stays the same, so it is heap-only (HOT): no index entry
// written, no row version left for vacuum. The appends run through the
// pipeline's own statements (queueAppends), each in a transaction of a
// connection whose own counters the server reports to it.
func TestTurnUpdatesAreHeapOnly(t *testing.T) {
	dsn := postgresDSN(t)
	ctx := context.Background()
	db := openStore(t, DriverPostgres, dsn)
	start := time.Date(2026, 3, 1, 12, 0, 5, 0, time.UTC)
	c := createConversations(t, db, 1, start, "")[0]
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	// appendAt appends one message at at and reports how many of the
	// transaction's updates of conversations were heap-only, of how many.
	appendAt := func(at time.Time) (hot, updated int64) {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		// The counters hold what this backend has not yet reported, which
		// may include earlier transactions: take the difference.
		counters := `SELECT pg_stat_get_xact_tuples_hot_updated('conversations'::regclass),
			pg_stat_get_xact_tuples_updated('conversations'::regclass)`
		var hot0, updated0 int64
		if err := tx.QueryRow(ctx, counters).Scan(&hot0, &updated0); err != nil {
			t.Fatal(err)
		}
		a := ledger.Append{Conv: c, ExpectSeq: c.LastSeq, RequireActive: true, At: at, Tokens: 3, Cost: 0.01, Model: "m",
			Messages: []ledger.Message{{ConversationID: c.ID, Seq: c.LastSeq + 1, Role: "assistant", Content: "hi", Status: ledger.MsgOK, CreatedAt: at}}}
		b := &pgx.Batch{}
		queueAppends(b, []*writeOp{{app: &a}})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRow(ctx, counters).Scan(&hot, &updated); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		c.LastSeq++
		return hot - hot0, updated - updated0
	}
	for _, step := range []struct {
		at  time.Time
		hot int64
	}{
		{start.Add(10 * time.Second), 1},  // same minute as the create
		{start.Add(50 * time.Second), 1},  // 12:00:55
		{start.Add(56 * time.Second), 0},  // 12:01:01: the minute moved, the sweep index with it
		{start.Add(100 * time.Second), 1}, // 12:01:45
	} {
		if hot, updated := appendAt(step.at); updated != 1 || hot != step.hot {
			t.Errorf("append at %s: %d of %d conversation updates heap-only, want %d of 1",
				step.at.Format("15:04:05"), hot, updated, step.hot)
		}
	}
	var last time.Time
	var seq int64
	if err := conn.QueryRow(ctx, "SELECT last_activity_at, last_seq FROM conversations WHERE id = $1", c.ID).Scan(&last, &seq); err != nil ||
		!last.Equal(start.Add(100*time.Second)) || seq != 4 {
		t.Fatalf("conversation after the appends: last activity %s, seq %d (%v)", last, seq, err)
	}
}

// TestPipelineStoresEveryColumn: the pipeline's statements read their
// rows from array parameters by subscript (pgArrayRows); every column of
// every message comes back as it was given, NULLs (no client id, no due
// time) included, in conversations appended to in one group, and the
// conversations' counters and the final reply's answered mark land with
// them.
func TestPipelineStoresEveryColumn(t *testing.T) {
	dsn := postgresDSN(t)
	db := openStore(t, DriverPostgres, dsn)
	at := time.Date(2026, 3, 1, 12, 0, 5, 123456000, time.UTC)
	convs := createConversations(t, db, 3, at, "")
	client, due := "client-ü", at.Add(time.Minute)
	want := [][]ledger.Message{
		{{ConversationID: convs[0].ID, Seq: 1, Role: "user", Content: "héllo\n'quoted' \"and\" {braces}, NULL", ClientMsgID: &client,
			Status: ledger.MsgOK, CreatedAt: at, TurnState: ledger.TurnRunning, TurnOwner: "replica-1", TurnAttempt: 2, TurnLead: 1,
			TurnTrack: true, Attachments: `[{"kind":"image","file_id":"f1"}]`, Quote: "the 'quoted' line\n> and {more}"}},
		{{ConversationID: convs[1].ID, Seq: 1, Role: "user", Content: "", Status: ledger.MsgOK, CreatedAt: at,
			TurnState: ledger.TurnPending, TurnOwner: "replica-2", TurnDue: &due}},
		{{ConversationID: convs[2].ID, Seq: 1, Role: "user", Content: "question", Status: ledger.MsgOK, CreatedAt: at,
			TurnState: ledger.TurnRunning, TurnOwner: "replica-1", TurnAttempt: 1, TurnLead: 1}},
	}
	var ops []*writeOp
	for i, msgs := range want {
		a := ledger.Append{Conv: convs[i], ExpectSeq: 0, RequireActive: true, At: at, Messages: msgs}
		ops = append(ops, &writeOp{app: &a})
	}
	replies := []ledger.Message{
		{ConversationID: convs[2].ID, Seq: 2, Role: "assistant", ToolCalls: `[{"id":"call-1","name":"lookup"}]`, ReplyTo: 1,
			Status: ledger.MsgOK, CreatedAt: at.Add(time.Second)},
		{ConversationID: convs[2].ID, Seq: 3, Role: "tool", Content: "42", ToolCallID: "call-1", ReplyTo: 1, Status: ledger.MsgOK,
			CreatedAt: at.Add(time.Second)},
		{ConversationID: convs[2].ID, Seq: 4, Role: "assistant", Content: "answer", ReplyTo: 1, Status: ledger.MsgFailed,
			Error: "model said no", PromptTokens: 11, CompletionTkns: 7, Cost: 0.125, CreatedAt: at.Add(time.Second)},
	}
	p := db.commit.pipe
	if err := p.run(ops); err != nil {
		t.Fatal(err)
	}
	convs[2].LastSeq = 1
	a := ledger.Append{Conv: convs[2], ExpectSeq: 1, RequireActive: true, At: at.Add(time.Second), Tokens: 18, Cost: 0.125, Model: "m2",
		Messages: replies, Answers: []int64{1}}
	if err := p.run([]*writeOp{{app: &a}}); err != nil {
		t.Fatal(err)
	}
	want[2][0].TurnState = ledger.TurnAnswered
	want[2] = append(want[2], replies...)

	for i, msgs := range want {
		var got []ledger.Message
		if err := db.read.Where("conversation_id = ?", convs[i].ID).Order("seq").Find(&got).Error; err != nil {
			t.Fatal(err)
		}
		if len(got) != len(msgs) {
			t.Fatalf("conversation %d: %d messages stored, want %d", i, len(got), len(msgs))
		}
		for j := range msgs {
			g, w := got[j], msgs[j]
			if !g.CreatedAt.Equal(w.CreatedAt) || (g.TurnDue == nil) != (w.TurnDue == nil) ||
				(g.TurnDue != nil && !g.TurnDue.Equal(*w.TurnDue)) || (g.ClientMsgID == nil) != (w.ClientMsgID == nil) ||
				(g.ClientMsgID != nil && *g.ClientMsgID != *w.ClientMsgID) {
				t.Errorf("conversation %d seq %d: times or NULLs differ: got %+v, want %+v", i, w.Seq, g, w)
			}
			g.CreatedAt, g.TurnDue, g.ClientMsgID = w.CreatedAt, w.TurnDue, w.ClientMsgID
			if g != w {
				t.Errorf("conversation %d seq %d:\n got %+v\nwant %+v", i, w.Seq, g, w)
			}
		}
	}
	var seq, tokens int64
	var cost float64
	var model string
	if err := db.read.Raw("SELECT last_seq, total_tokens, cost, model FROM conversations WHERE id = ?", convs[2].ID).
		Row().Scan(&seq, &tokens, &cost, &model); err != nil || seq != 4 || tokens != 18 || cost != 0.125 || model != "m2" {
		t.Errorf("conversation after its reply: last seq %d, %d tokens, cost %v, model %q (%v)", seq, tokens, cost, model, err)
	}
}

// TestPipelinePlansFindRowsByKey: the pipeline's statements find each
// conversation and each message they update by its key, in the
// generic plan the server settles on for a prepared statement, once the
// tables have more than a few pages. Their rows come from arrays whose
// length the planner cannot see (pgArrayRows); an estimate of many rows
// would hash-join them with a scan of the whole table on every commit.
func TestPipelinePlansFindRowsByKey(t *testing.T) {
	dsn := postgresDSN(t)
	ctx := context.Background()
	db := openStore(t, DriverPostgres, dsn)
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if err := db.write.Exec(`INSERT INTO conversations (id, session_key, channel, status, started_at, last_activity_at, last_seq)
		SELECT 'c' || g, 'websocket:u' || g, 'websocket', 'active', ?, ?, 1 FROM generate_series(1, 5000) AS g`, at, at).Error; err != nil {
		t.Fatal(err)
	}
	if err := db.write.Exec(`INSERT INTO messages (conversation_id, seq, role, content, reply_to, status, prompt_tokens,
		completion_tokens, cost, created_at, turn_state, turn_owner, turn_lead)
		SELECT 'c' || g, 1, 'user', 'hello', 0, 'ok', 0, 0, 0, ?, CASE WHEN g % 10 = 0 THEN 'running' ELSE 'answered' END, 'r1', 1
		FROM generate_series(1, 5000) AS g`, at).Error; err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	for _, q := range []string{"ANALYZE conversations", "ANALYZE messages",
		"SET plan_cache_mode = force_generic_plan"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range []struct {
		what, query, want, never string
		args                     string
	}{
		{"conversation update", pgUpdateConversations, "Index Scan using conversations_pkey on conversations", "Seq Scan on conversations",
			`('{c1,c2}', '{1,1}', '{1,1}', '{2026-03-01T12:00:00Z,2026-03-01T12:00:00Z}', '{0,0}', '{0,0}', '{"",""}', '{t,t}', '{0,0}', '{f,f}')`},
		{"answered mark", pgAnswerTurns, "Index Cond: (((conversation_id)::text = (s.v_conv)::text)", "Seq Scan on messages",
			`('{c10,c20}', '{1,1}', '{1,1}', '{2,2}')`},
	} {
		name := fmt.Sprint("plan_", i)
		if _, err := conn.Exec(ctx, "PREPARE "+name+" AS "+c.query); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		rows, err := conn.Query(ctx, "EXPLAIN EXECUTE "+name+c.args)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		plan := strings.Join(lines, "\n")
		if !strings.Contains(plan, c.want) || strings.Contains(plan, c.never) || strings.Contains(plan, "Hash Join") {
			t.Errorf("%s: generic plan\n%s\nwant %q, never %q nor a hash join", c.what, plan, c.want, c.never)
		}
	}
}
