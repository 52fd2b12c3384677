package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// TestGroupCommitIsolatesAFailingWrite: writes queued together share a
// transaction; one that fails (after writing) leaves nothing behind, and the
// others still commit.
func TestGroupCommitIsolatesAFailingWrite(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		// One worker, so that the queued writes form one batch.
		c := newCommitter(db.write, db.driver, 1, 128)
		defer c.close()
		// Hold the writer busy so that the next writes queue into one batch.
		busy, release := make(chan struct{}), make(chan struct{})
		go c.do(ctx, func(tx *gorm.DB) error { close(busy); <-release; return nil })
		<-busy
		boom := errors.New("boom")
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = c.do(ctx, func(tx *gorm.DB) error {
					if err := tx.Create(&ledger.ChannelState{Key: fmt.Sprint("k", i), Value: "v"}).Error; err != nil {
						return err
					}
					if i == 3 {
						return boom // after its own insert
					}
					return nil
				})
			}()
		}
		for len(c.queue) < len(errs) {
			waitQueue()
		}
		close(release)
		wg.Wait()
		for i, err := range errs {
			if (i == 3) != errors.Is(err, boom) || (i != 3 && err != nil) {
				t.Fatalf("write %d: %v", i, err)
			}
		}
		var keys []string
		db.Gorm().Model(&ledger.ChannelState{}).Order("name").Pluck("name", &keys)
		if fmt.Sprint(keys) != "[k0 k1 k2 k4 k5 k6 k7]" {
			t.Fatalf("stored %v: the failed write left a row, or took others with it", keys)
		}
	})
}

// TestMergedAppendsFailAlone: appends queued together run as set-based
// statements; a stale one, one to an archived conversation and one with a
// stored client id each get their own error, the others commit, and two
// appends to one conversation in one batch both land in order.
func TestMergedAppendsFailAlone(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		convs := createConversations(t, db, 6, now, "")
		userMsg := func(c *ledger.Conversation, seq int64, client string) ledger.Message {
			m := ledger.Message{ConversationID: c.ID, Seq: seq, Role: "user", Content: fmt.Sprint("m", seq), Status: ledger.MsgOK, CreatedAt: now}
			if client != "" {
				m.ClientMsgID = &client
			}
			return m
		}
		// conv-4 already holds client id "dup"; conv-5 is archived.
		if err := db.Append(ctx, ledger.Append{Conv: convs[4], ExpectSeq: 0, Messages: []ledger.Message{userMsg(convs[4], 1, "dup")}, At: now}); err != nil {
			t.Fatal(err)
		}
		if ok, err := db.Archive(ctx, convs[5].ID, ledger.ReasonManual, now, -1); !ok || err != nil {
			t.Fatal(ok, err)
		}

		release := holdWriter(db)
		same := *convs[1] // a second writer's copy of conv-1, one message ahead
		same.LastSeq = 1
		appends := []ledger.Append{
			{Conv: convs[0], ExpectSeq: 0, Messages: []ledger.Message{userMsg(convs[0], 1, "a")}, At: now, RequireActive: true},
			{Conv: convs[1], ExpectSeq: 0, Messages: []ledger.Message{userMsg(convs[1], 1, "")}, At: now, RequireActive: true},
			{Conv: &same, ExpectSeq: 1, Messages: []ledger.Message{{ConversationID: "conv-1", Seq: 2, Role: "assistant", Content: "r", ReplyTo: 1, Status: ledger.MsgOK, CreatedAt: now}}, At: now, Tokens: 7, Cost: 0.5, Model: "m1"},
			{Conv: convs[2], ExpectSeq: 3, Messages: []ledger.Message{userMsg(convs[2], 4, "")}, At: now}, // stale
			{Conv: convs[3], ExpectSeq: 0, Messages: []ledger.Message{userMsg(convs[3], 1, ""), userMsg(convs[3], 2, "")}, At: now},
			{Conv: convs[4], ExpectSeq: 1, Messages: []ledger.Message{userMsg(convs[4], 2, "dup")}, At: now, RequireActive: true},
			{Conv: convs[5], ExpectSeq: 0, Messages: []ledger.Message{userMsg(convs[5], 1, "")}, At: now, RequireActive: true},
		}
		writes := make([]func() error, len(appends))
		for i, a := range appends {
			writes[i] = func() error { return db.Append(ctx, a) }
		}
		errs := queueInOrder(db, release, writes)
		want := []error{nil, nil, nil, ledger.ErrStale, nil, ledger.ErrDuplicate, ledger.ErrStale}
		for i, err := range errs {
			if !errors.Is(err, want[i]) || (want[i] == nil && err != nil) {
				t.Errorf("append %d: got %v, want %v", i, err, want[i])
			}
		}
		seqs := func(id string) string {
			var got []int64
			db.Gorm().Model(&ledger.Message{}).Where("conversation_id = ?", id).Order("seq").Pluck("seq", &got)
			return fmt.Sprint(got)
		}
		for id, want := range map[string]string{"conv-0": "[1]", "conv-1": "[1 2]", "conv-2": "[]", "conv-3": "[1 2]", "conv-4": "[1]", "conv-5": "[]"} {
			if got := seqs(id); got != want {
				t.Errorf("%s holds seqs %s, want %s", id, got, want)
			}
		}
		c1, err := db.Conversation(ctx, "conv-1")
		if err != nil || c1.LastSeq != 2 || c1.TotalTokens != 7 || c1.Cost != 0.5 || c1.Model != "m1" || !c1.LastActivityAt.Equal(now) {
			t.Fatalf("conv-1 after two appends: %+v, %v", c1, err)
		}
		if c3, _ := db.Conversation(ctx, "conv-3"); c3.LastSeq != 2 {
			t.Fatalf("conv-3 last seq %d, want 2", c3.LastSeq)
		}
	})
}

// TestAFailedStatementKeepsNoRowOfIt: the last row of a batch's merged
// INSERT repeats a stored client id, after rows of two other appends and
// a first row of its own. The append with the duplicate fails alone and
// keeps none of its rows; the others land once.
func TestAFailedStatementKeepsNoRowOfIt(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		convs := createConversations(t, db, 3, now, "")
		msg := func(c *ledger.Conversation, seq int64, client string) ledger.Message {
			return ledger.Message{ConversationID: c.ID, Seq: seq, Role: "user", Content: fmt.Sprint(c.ID, "/", seq),
				Status: ledger.MsgOK, CreatedAt: now, ClientMsgID: &client}
		}
		if err := db.Append(ctx, ledger.Append{Conv: convs[2], Messages: []ledger.Message{msg(convs[2], 1, "taken")}, At: now}); err != nil {
			t.Fatal(err)
		}
		release := holdWriter(db)
		appends := []ledger.Append{
			{Conv: convs[0], Messages: []ledger.Message{msg(convs[0], 1, "a1"), msg(convs[0], 2, "a2")}, At: now},
			{Conv: convs[1], Messages: []ledger.Message{msg(convs[1], 1, "b1")}, At: now},
			{Conv: convs[2], ExpectSeq: 1, Messages: []ledger.Message{msg(convs[2], 2, "fresh"), msg(convs[2], 3, "taken")}, At: now},
		}
		writes := make([]func() error, len(appends))
		for i, a := range appends {
			writes[i] = func() error { return db.Append(ctx, a) }
		}
		errs := queueInOrder(db, release, writes)
		if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], ledger.ErrDuplicate) {
			t.Fatalf("errors %v, want nil, nil, a duplicate", errs)
		}
		var got []string
		db.Gorm().Model(&ledger.Message{}).Order("conversation_id, seq").Pluck("content", &got)
		if fmt.Sprint(got) != "[conv-0/1 conv-0/2 conv-1/1 conv-2/1]" {
			t.Fatalf("stored %v", got)
		}
		if c2, _ := db.Conversation(ctx, "conv-2"); c2.LastSeq != 1 {
			t.Fatalf("conv-2 last seq %d, want 1", c2.LastSeq)
		}
	})
}

// TestAppendStoresTheQuote: a user message's quote (the text it replies
// to) is stored by the append — the SQL of SQLite and the pipeline of
// PostgreSQL alike — and read back with the message and with the batch a
// claim takes.
func TestAppendStoresTheQuote(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		c := createConversations(t, db, 1, now, "")[0]
		quote := "what 'you' said:\n\"the second point\" ü"
		msgs := []ledger.Message{
			{ConversationID: c.ID, Seq: 1, Role: "user", Content: "plain", Status: ledger.MsgOK, CreatedAt: now, TurnState: ledger.TurnPending, TurnOwner: "r1"},
			{ConversationID: c.ID, Seq: 2, Role: "user", Content: "why?", Quote: quote, Status: ledger.MsgOK, CreatedAt: now, TurnState: ledger.TurnPending, TurnOwner: "r1"},
		}
		if err := db.Append(ctx, ledger.Append{Conv: c, ExpectSeq: 0, Messages: msgs, At: now}); err != nil {
			t.Fatal(err)
		}
		got, err := db.MessagesAfter(ctx, c.ID, 0, 10)
		if err != nil || len(got) != 2 || got[0].Quote != "" || got[1].Quote != quote {
			t.Fatalf("stored messages = %+v, %v; want the second with quote %q", got, err, quote)
		}
		b, err := db.ClaimBatch(ctx, ledger.Claim{ConversationID: c.ID, Owner: "r1", Now: now, Limit: 10})
		if err != nil || b == nil || len(b.Rows) != 2 || b.Rows[0].Quote != "" || b.Rows[1].Quote != quote {
			t.Fatalf("claimed batch = %+v, %v; want the second row with the quote", b, err)
		}
	})
}

// TestAppendsMergeIntoFewStatements: a batch of appends to distinct
// conversations costs, on SQLite, one UPDATE and one INSERT per stmtRows of
// them; on PostgreSQL one pipeline — a single round trip carrying one UPDATE
// and one INSERT whatever the batch's size — and each conversation ends up
// exactly as if its append ran alone.
func TestAppendsMergeIntoFewStatements(t *testing.T) {
	var trace pipeTracer
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		if db.driver == DriverPostgres {
			// The same schema again, through pools that trace what they send.
			dsn := postgresDSN(t)
			var err error
			if db, err = Open(context.Background(), DriverPostgres, dsn, OpenOptions{Tracer: &trace}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
		}
		ctx := context.Background()
		start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		at := start.Add(time.Minute)
		const n = stmtRows + 8 // two statements of each kind
		convs := createConversations(t, db, n, start, "old")
		// On SQLite the committer runs the appends' statements itself
		// (stmtCache): each one it runs is counted there.
		ran := func() int64 {
			if db.commit.stmts == nil {
				return 0
			}
			return db.commit.stmts.prepared.Load() + db.commit.stmts.compiled.Load()
		}
		before := ran()
		release := holdWriter(db)
		trace.reset()
		var wg sync.WaitGroup
		for i, c := range convs {
			model := ""
			if i%2 == 0 {
				model = "new"
			}
			a := ledger.Append{Conv: c, Messages: []ledger.Message{
				{ConversationID: c.ID, Seq: 1, Role: "assistant", Content: "a", ReplyTo: 1, Status: ledger.MsgOK, CreatedAt: at},
				{ConversationID: c.ID, Seq: 2, Role: "assistant", Content: "b", ReplyTo: 1, Status: ledger.MsgOK, CreatedAt: at},
			}, At: at, Tokens: int64(i), Cost: 0.25, Model: model, RequireActive: true}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := db.Append(ctx, a); err != nil {
					t.Error(err)
				}
			}()
		}
		for writesQueued(db) < n {
			waitQueue()
		}
		release()
		wg.Wait()
		if db.driver == DriverSQLite {
			// 2 UPDATEs for n conversations, 3 INSERTs for 2n messages,
			// and 3 UPDATEs marking the turns of 2n final replies.
			if got := ran() - before; got != 8 {
				t.Errorf("%d appends ran %d statements, want 8", n, got)
			}
		} else if got := trace.String(); got != "1 batches of 3 statements, 2 other statements, 0 prepares" {
			// The conversations' UPDATE, the messages' INSERT, the final
			// replies' marks. (The other statements are the COMMITs of the
			// writes holding the two workers.)
			t.Errorf("%d appends sent %s, want one batch of 3 statements", n, got)
		}
		for i := range convs {
			c, err := db.Conversation(ctx, fmt.Sprint("conv-", i))
			wantModel := "old"
			if i%2 == 0 {
				wantModel = "new"
			}
			if err != nil || c.LastSeq != 2 || c.TotalTokens != int64(i) || c.Cost != 0.25 || c.Model != wantModel || !c.LastActivityAt.Equal(at) {
				t.Fatalf("conversation %d: %+v, %v", i, c, err)
			}
			if msgs, _ := db.RecentMessages(ctx, c.ID, 10); len(msgs) != 2 || msgs[1].Content != "b" {
				t.Fatalf("conversation %d holds %+v", i, msgs)
			}
		}
	})
}

// TestCreatesMergeAndFailAlone: conversations created in one batch (many
// users' first messages at once) are inserted by one statement per stmtRows
// of them, each stored as given; when some cannot be (their key already has
// an active conversation, stored or earlier in the batch), each of those
// gets ErrStale and every other one is created.
func TestCreatesMergeAndFailAlone(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		var statements atomic.Int32
		db.write.Callback().Create().After("gorm:create").Register("count", func(*gorm.DB) { statements.Add(1) })
		conv := func(id, key string) *ledger.Conversation {
			return &ledger.Conversation{ID: id, SessionKey: key, Channel: "websocket", Status: ledger.StatusActive,
				StartedAt: at, LastActivityAt: at.Add(time.Second), AgentName: "echo", Model: "m-" + id, UserID: "u-" + id}
		}
		// create queues convs in order behind a held writer and returns
		// each one's error.
		create := func(convs []*ledger.Conversation) []error {
			writes := make([]func() error, len(convs))
			for i, c := range convs {
				writes[i] = func() error { return db.CreateConversation(ctx, c) }
			}
			return queueInOrder(db, holdWriter(db), writes)
		}

		const n = stmtRows + 8
		var convs []*ledger.Conversation
		for i := 0; i < n; i++ {
			convs = append(convs, conv(fmt.Sprint("c", i), fmt.Sprint("websocket:u", i)))
		}
		statements.Store(0)
		for i, err := range create(convs) {
			if err != nil {
				t.Fatalf("create %d: %v", i, err)
			}
		}
		if got := statements.Load(); got != 2 {
			t.Errorf("%d creates ran %d INSERTs, want 2", n, got)
		}
		for _, want := range convs {
			got, err := db.ActiveConversation(ctx, want.SessionKey)
			if err != nil || got == nil || got.ID != want.ID || got.Model != want.Model || got.UserID != want.UserID ||
				!got.StartedAt.Equal(at) || !got.LastActivityAt.Equal(want.LastActivityAt) || got.LastSeq != 0 || got.Epoch != 0 {
				t.Fatalf("stored %+v, %v; want %+v", got, err, want)
			}
		}

		// u0 has an active conversation already; v1 is created twice.
		errs := create([]*ledger.Conversation{conv("d0", "websocket:v0"), conv("d1", "websocket:u0"), conv("d2", "websocket:v1"),
			conv("d3", "websocket:v1"), conv("d4", "websocket:v2")})
		want := []error{nil, ledger.ErrStale, nil, ledger.ErrStale, nil}
		for i, err := range errs {
			if !errors.Is(err, want[i]) || (want[i] == nil && err != nil) {
				t.Errorf("create d%d: got %v, want %v", i, err, want[i])
			}
		}
		for key, id := range map[string]string{"websocket:v0": "d0", "websocket:u0": "c0", "websocket:v1": "d2", "websocket:v2": "d4"} {
			if got, err := db.ActiveConversation(ctx, key); err != nil || got == nil || got.ID != id {
				t.Errorf("%s: active conversation %+v, %v; want %s", key, got, err, id)
			}
		}
	})
}

// TestInterleavedBatchCommitsOnce: on PostgreSQL a batch whose appends and
// other writes alternate in the queue (users' first messages: a
// conversation created, another's message appended, ...) commits its
// appends in one pipeline and its other writes in one transaction, not a
// transaction per run; every write lands.
func TestInterleavedBatchCommitsOnce(t *testing.T) {
	var trace pipeTracer
	db := openPostgres(t, &trace)
	ctx := context.Background()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	convs := createConversations(t, db, 3, at, "")
	release := holdWriter(db)
	trace.reset()
	writes := make([]func() error, 6)
	for i := range writes {
		if i%2 == 0 {
			c := convs[i/2]
			writes[i] = func() error {
				return db.Append(ctx, ledger.Append{Conv: c, Messages: []ledger.Message{{ConversationID: c.ID, Seq: 1, Role: "user", Content: "hi", Status: ledger.MsgOK, CreatedAt: at}}, At: at})
			}
		} else {
			writes[i] = func() error {
				return db.CreateConversation(ctx, &ledger.Conversation{ID: fmt.Sprint("new-", i), SessionKey: fmt.Sprint("websocket:new", i),
					Channel: "websocket", Status: ledger.StatusActive, StartedAt: at, LastActivityAt: at})
			}
		}
	}
	for i, err := range queueInOrder(db, release, writes) {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	// The three appends in one pipeline; the COMMITs of the writes
	// holding the two workers, then BEGIN, the INSERT of the three
	// conversations and COMMIT.
	trace.mu.Lock()
	batches, batched, queries := trace.batches, trace.batched, trace.queries
	trace.mu.Unlock()
	if batches != 1 || batched != 2 || queries != 5 {
		t.Errorf("an interleaved batch sent %s, want 1 batch of 2 statements and 5 other statements", &trace)
	}
	for _, c := range convs {
		if got, _ := db.Conversation(ctx, c.ID); got == nil || got.LastSeq != 1 {
			t.Errorf("%s after its append: %+v", c.ID, got)
		}
	}
	for _, key := range []string{"websocket:new1", "websocket:new3", "websocket:new5"} {
		if got, err := db.ActiveConversation(ctx, key); err != nil || got == nil {
			t.Errorf("%s: %+v, %v", key, got, err)
		}
	}
}

// createConversations creates active WebSocket conversations conv-0 …
// conv-(n-1) of users u0 … u(n-1), started and last active at, with model.
func createConversations(t testing.TB, db *DB, n int, at time.Time, model string) []*ledger.Conversation {
	t.Helper()
	convs := make([]*ledger.Conversation, n)
	for i := range convs {
		convs[i] = &ledger.Conversation{ID: fmt.Sprint("conv-", i), SessionKey: fmt.Sprint("websocket:u", i), Channel: "websocket",
			Status: ledger.StatusActive, StartedAt: at, LastActivityAt: at, Model: model}
		if err := db.CreateConversation(context.Background(), convs[i]); err != nil {
			t.Fatal(err)
		}
	}
	return convs
}

// holdWriter gives db a committer with one worker and keeps that worker
// busy until release is called, so that the writes queued meanwhile form
// one batch.
func holdWriter(db *DB) (release func()) {
	db.commit.close()
	db.commit = newCommitter(db.write, db.driver, 1, 512)
	done := make(chan struct{})
	// hold keeps the worker of queue in a transaction until release: on
	// PostgreSQL the appends' worker too.
	hold := func(queue chan *writeOp) {
		busy := make(chan struct{})
		queue <- &writeOp{fn: func(tx *gorm.DB) error { close(busy); <-done; return nil }, done: make(chan struct{}, 1)}
		<-busy
	}
	hold(db.commit.queue)
	if db.commit.appends != nil {
		hold(db.commit.appends)
	}
	return func() { close(done) }
}

// writesQueued is how many writes wait in the committer's queues.
func writesQueued(db *DB) int {
	return len(db.commit.queue) + len(db.commit.appends)
}

// queueInOrder starts writes one after another, each once the one before
// is queued behind the writer holdWriter holds, so that they form one
// batch in this order; then it lets the writer go (release) and returns
// each write's error.
func queueInOrder(db *DB, release func(), writes []func() error) []error {
	errs := make([]error, len(writes))
	var wg sync.WaitGroup
	for i, write := range writes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = write() }()
		for writesQueued(db) < i+1 {
			waitQueue()
		}
	}
	release()
	wg.Wait()
	return errs
}

// TestCheckpointerCopiesTheLog: the background checkpointer's passive
// checkpoint copies every committed frame of the write-ahead log into the
// database file.
func TestCheckpointerCopiesTheLog(t *testing.T) {
	db := openStore(t, DriverSQLite, filepath.Join(t.TempDir(), "gateway.db"))
	ctx := context.Background()
	for i := 0; i < 50; i++ {
		if err := db.SetState(ctx, fmt.Sprint("k", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	frames, copied, err := db.ckpt.checkpoint(ctx)
	if err != nil || frames == 0 || copied != frames {
		t.Fatalf("checkpoint: %d frames, %d copied, %v", frames, copied, err)
	}
}

// pipeTracer counts what a store's pgx pools send: batches, their
// statements, statements outside a batch, and prepares.
type pipeTracer struct {
	mu                        sync.Mutex
	queries, batches, batched int
	prepares                  int
}

func (p *pipeTracer) reset() {
	p.mu.Lock()
	p.queries, p.batches, p.batched, p.prepares = 0, 0, 0, 0
	p.mu.Unlock()
}

func (p *pipeTracer) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("%d batches of %d statements, %d other statements, %d prepares", p.batches, p.batched, p.queries, p.prepares)
}

// count adds one to the counter n points to.
func (p *pipeTracer) count(n *int) {
	p.mu.Lock()
	*n++
	p.mu.Unlock()
}

func (p *pipeTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	p.count(&p.queries)
	return ctx
}
func (p *pipeTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (p *pipeTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	p.count(&p.batches)
	return ctx
}
func (p *pipeTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	p.count(&p.batched)
}
func (p *pipeTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
func (p *pipeTracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	p.count(&p.prepares)
	return ctx
}
func (p *pipeTracer) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// TestLongWritesHoldNoAppend: on PostgreSQL the appends have a worker of
// their own, so other writes that take long (a sweep's chunk, a claim
// waiting for a row lock) never keep a turn's message from being stored.
func TestLongWritesHoldNoAppend(t *testing.T) {
	db := openPostgres(t, nil)
	ctx := context.Background()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	convs := createConversations(t, db, 1, at, "")
	done := make(chan struct{})
	var busy atomic.Int32
	var held sync.WaitGroup
	// One held write per worker: each is queued once the one before it
	// runs, so that no worker takes two into one batch.
	for i := range db.commit.workers {
		held.Go(func() {
			if err := db.commit.do(ctx, func(*gorm.DB) error { busy.Add(1); <-done; return nil }); err != nil {
				t.Error(err)
			}
		})
		for int(busy.Load()) < i+1 {
			waitQueue()
		}
	}
	stored := make(chan error, 1)
	go func() {
		c := convs[0]
		stored <- db.Append(ctx, ledger.Append{Conv: c, Messages: []ledger.Message{{ConversationID: c.ID, Seq: 1, Role: "user", Content: "hi", Status: ledger.MsgOK, CreatedAt: at}}, At: at})
	}()
	select {
	case err := <-stored:
		if err != nil {
			t.Errorf("append while every other worker is held: %v", err)
		}
	case <-time.After(30 * time.Second): // a bound on a hang, not a timing
		t.Errorf("an append waited for %d long writes of other kinds", db.commit.workers)
	}
	close(done)
	held.Wait()
	if got, err := db.Conversation(ctx, convs[0].ID); err != nil || got.LastSeq != 1 {
		t.Fatalf("%s after its append: %+v, %v", convs[0].ID, got, err)
	}
}

// TestAppendsCommitOnePipelineAtATime: on PostgreSQL the appends that
// arrive while a pipeline commits wait for it and go together in the
// next: never two pipelines at once, whatever the number of writers.
func TestAppendsCommitOnePipelineAtATime(t *testing.T) {
	var trace flightTracer
	db := openPostgres(t, &trace)
	ctx := context.Background()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const writers, each = 40, 10
	convs := createConversations(t, db, writers, at, "")
	trace.reset()
	appendAtOnce(t, db, convs, each, at)
	if most := trace.most.Load(); most != 1 {
		t.Errorf("%d pipelines were in flight at once, want 1", most)
	}
	t.Logf("%d appends of %d writers: %s", writers*each, writers, &trace.pipeTracer)
	for _, c := range convs {
		if got, err := db.Conversation(ctx, c.ID); err != nil || got.LastSeq != each {
			t.Fatalf("%s after its appends: %+v, %v", c.ID, got, err)
		}
	}
}

// flightTracer counts what pipeTracer does and the most batches that
// were in flight at once.
type flightTracer struct {
	pipeTracer
	in, most atomic.Int32
}

func (f *flightTracer) TraceBatchStart(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	n := f.in.Add(1)
	for m := f.most.Load(); n > m && !f.most.CompareAndSwap(m, n); m = f.most.Load() {
	}
	return f.pipeTracer.TraceBatchStart(ctx, c, d)
}

func (f *flightTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) { f.in.Add(-1) }

// openPostgres opens a store on a new schema of the test's PostgreSQL,
// its pools traced by tracer when it is set.
func openPostgres(t *testing.T, tracer pgx.QueryTracer) *DB {
	t.Helper()
	db, err := Open(context.Background(), DriverPostgres, postgresDSN(t), OpenOptions{Tracer: tracer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// ObserveCommits tells each group commit with its writes: every append
// once, with its session key and when it was queued, and its batch's
// times in order (on PostgreSQL the pipeline's sending among them).
func TestObserveCommitsTellsEveryAppend(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		const writers, each = 20, 5
		convs := createConversations(t, db, writers, at, "")
		var mu sync.Mutex
		var batches []CommitBatch
		remove := db.ObserveCommits(func(b CommitBatch) {
			mu.Lock()
			batches = append(batches, b)
			mu.Unlock()
		})
		begin := time.Now()
		appendAtOnce(t, db, convs, each, at)
		remove()
		// Removed: a later commit is not told.
		if err := db.Append(ctx, ledger.Append{Conv: convs[0], ExpectSeq: each, At: at,
			Messages: []ledger.Message{{ConversationID: convs[0].ID, Seq: each + 1, Role: "user", Content: "hi", Status: ledger.MsgOK, CreatedAt: at}}}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		perKey := map[string]int{}
		for _, b := range batches {
			if b.Start.Before(begin) || b.End.Before(b.Start) {
				t.Fatalf("batch times out of order: %+v", b)
			}
			if db.Driver() == DriverPostgres && (b.Sent.Before(b.Start) || b.End.Before(b.Sent)) {
				t.Fatalf("pipeline sent outside its batch: start %v sent %v end %v", b.Start, b.Sent, b.End)
			}
			for _, w := range b.Writes {
				if w.Queued.IsZero() || w.Queued.Before(begin) || w.Queued.After(b.Start) {
					t.Fatalf("write queued at %v, batch started %v", w.Queued, b.Start)
				}
				perKey[w.SessionKey]++
			}
		}
		if len(perKey) != writers {
			t.Fatalf("%d session keys told, want %d: %v", len(perKey), writers, perKey)
		}
		for _, c := range convs {
			if perKey[c.SessionKey] != each {
				t.Fatalf("%s told %d times, want %d", c.SessionKey, perKey[c.SessionKey], each)
			}
		}
		t.Logf("%d appends in %d batches", writers*each, len(batches))
	})
}

// appendAtOnce appends each messages to every one of convs, a writer per
// conversation, all at once, and waits for them.
func appendAtOnce(t *testing.T, db *DB, convs []*ledger.Conversation, each int64, at time.Time) {
	t.Helper()
	var wg sync.WaitGroup
	for _, c := range convs {
		wg.Go(func() {
			for seq := int64(1); seq <= each; seq++ {
				err := db.Append(context.Background(), ledger.Append{Conv: c, ExpectSeq: seq - 1, At: at,
					Messages: []ledger.Message{{ConversationID: c.ID, Seq: seq, Role: "user", Content: "hi", Status: ledger.MsgOK, CreatedAt: at}}})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
