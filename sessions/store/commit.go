package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// committer group-commits writes: each worker takes every write waiting in
// the queue (up to maxBatch), runs them in one transaction and commits once.
// A caller returns when its write's batch is committed, so an acknowledged
// message is on disk, while concurrent turns share the cost of a commit (one
// fsync on SQLite) instead of paying one each.
//
// Appends — the writes of every turn — are merged: consecutive appends of a
// batch run as one set-based UPDATE of their conversations and multi-row
// INSERTs of their messages, so a batch of a few hundred turns costs a
// handful of statements instead of two each.
//
// Conversations created in the same batch are merged the same way: one
// multi-row INSERT, so that many users arriving at once (each first message
// opens a conversation) cost a statement, not a round trip each.
//
// Writes rarely fail (a stale conversation, a duplicate client id); when one
// does, the batch is rolled back and its writes run again one transaction
// each, so no write sees another's failure.
//
// On PostgreSQL the appends have a queue and a worker of their own, which
// commits one pipeline at a time: the appends that arrive meanwhile wait
// and go together in the next. A turn's storage work on the server is
// mostly per statement and per commit, not per row, so fewer and larger
// commits cost it less CPU a turn; committing several pipelines at once
// split the same appends into more of them (see docs/performance.md,
// "One pipeline at a time"). The other writes (conversations created,
// claims, sweeps, ...) keep their own workers, so a long one never holds
// the turns' appends back.
type committer struct {
	db       *gorm.DB
	maxBatch int
	// queue holds every write on SQLite; on PostgreSQL the writes other
	// than appends, which go to appends.
	queue   chan *writeOp
	appends chan *writeOp
	workers int // queue's
	// afterCommit, when set, runs after each committed batch.
	afterCommit func()
	// observe, when set, is told of each batch (ObserveCommits).
	observe atomic.Pointer[func(CommitBatch)]
	// pipe, on PostgreSQL, commits a batch's appends as one pipelined
	// transaction.
	pipe *pgPipe
	// stmts, on SQLite, runs each batch's transaction on the writer's
	// connection and keeps the appends' statements prepared on it.
	stmts *stmtCache

	mu     sync.RWMutex // guards closed against sends on a closed queue
	closed bool
	wg     sync.WaitGroup
}

// writeOp is one queued write: a function of its own, an append, or a
// conversation to create. done gets one value when the write's batch has
// committed (or failed); the writer then puts the op back in writeOps
// (every write of every turn would allocate one, and its channel).
type writeOp struct {
	fn   func(tx *gorm.DB) error
	app  *ledger.Append
	conv *ledger.Conversation
	err  error
	done chan struct{} // buffered: the committer never waits on it
	// queued is when the op was queued, kept while commits are observed.
	queued time.Time
}

var writeOps = sync.Pool{New: func() any { return &writeOp{done: make(chan struct{}, 1)} }}

func newWriteOp() *writeOp { return writeOps.Get().(*writeOp) }

// free puts op back once its writer is done with it; nobody else holds
// it then (the committer let go of it when it signalled done).
func (op *writeOp) free() {
	op.fn, op.app, op.conv, op.err, op.queued = nil, nil, nil, nil, time.Time{}
	writeOps.Put(op)
}

func newCommitter(db *gorm.DB, driver string, workers, maxBatch int) *committer {
	if maxBatch <= 0 {
		maxBatch = 512
	}
	c := &committer{db: db, maxBatch: maxBatch, queue: make(chan *writeOp, maxBatch*workers), workers: workers}
	if driver == DriverPostgres {
		sqlDB, _ := db.DB()
		c.pipe = &pgPipe{db: sqlDB, translate: db.Dialector.(gorm.ErrorTranslator).Translate}
		c.appends = make(chan *writeOp, maxBatch)
		c.wg.Add(1)
		go c.run(c.appends)
	} else {
		c.stmts = newStmtCache(db)
	}
	for i := 0; i < workers; i++ {
		c.wg.Add(1)
		go c.run(c.queue)
	}
	return c
}

// do runs fn in a group-committed transaction and returns its error, or the
// commit's. ctx bounds only the wait for a place in the queue: once queued,
// the write is committed or failed, never abandoned half-way.
func (c *committer) do(ctx context.Context, fn func(tx *gorm.DB) error) error {
	op := newWriteOp()
	op.fn = fn
	return c.enqueue(ctx, op)
}

// append runs a in a group-committed transaction, merged with the other
// appends of its batch.
func (c *committer) append(ctx context.Context, a *ledger.Append) error {
	op := newWriteOp()
	op.app = a
	return c.enqueue(ctx, op)
}

// create inserts conv in a group-committed transaction, merged with the
// other conversations created in its batch.
func (c *committer) create(ctx context.Context, conv *ledger.Conversation) error {
	op := newWriteOp()
	op.conv = conv
	return c.enqueue(ctx, op)
}

func (c *committer) enqueue(ctx context.Context, op *writeOp) error {
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		op.free()
		return ledger.ErrClosed
	}
	if c.observe.Load() != nil {
		op.queued = time.Now()
	}
	queue := c.queue
	if op.app != nil && c.appends != nil {
		queue = c.appends
	}
	select {
	case queue <- op:
	case <-ctx.Done():
		c.mu.RUnlock()
		op.free()
		return ctx.Err()
	}
	c.mu.RUnlock()
	<-op.done
	err := op.err
	op.free()
	return err
}

func (c *committer) run(queue chan *writeOp) {
	defer c.wg.Done()
	batch := make([]*writeOp, 0, c.maxBatch)
	for op := range queue {
		batch = append(batch[:0], op)
	fill:
		for len(batch) < c.maxBatch {
			select {
			case more, ok := <-queue:
				if !ok {
					break fill
				}
				batch = append(batch, more)
			default:
				break fill
			}
		}
		c.commit(batch)
	}
}

// errOpFailed aborts a batch transaction when one of its writes failed.
var errOpFailed = errors.New("a write in the batch failed")

func (c *committer) commit(batch []*writeOp) {
	var start time.Time
	observe := c.observe.Load()
	if observe != nil {
		start = time.Now()
	}
	if c.pipe == nil {
		c.commitTx(batch)
	} else {
		// The appends go through the pipeline, the other writes through
		// one transaction. Every caller waits for its own write, so the
		// writes of a batch were all pending at once and none has seen
		// another's outcome: any order of them is one the queue could
		// have had. Keeping the queue's order would cut an interleaved
		// batch (many users' first messages: a conversation created, a
		// message appended, another created, ...) into a transaction per
		// run, one after the other.
		apps, others := make([]*writeOp, 0, len(batch)), make([]*writeOp, 0, 4)
		for _, op := range batch {
			if op.app != nil {
				apps = append(apps, op)
			} else {
				others = append(others, op)
			}
		}
		if len(others) > 0 {
			c.commitTx(others)
		}
		if len(apps) > 0 {
			c.pipe.commitAppends(apps)
		}
	}
	if c.afterCommit != nil {
		c.afterCommit()
	}
	if observe != nil {
		(*observe)(c.observed(batch, start))
	}
	for _, op := range batch {
		op.done <- struct{}{} // the op is its writer's again from here
	}
}

// commitTx runs batch in one transaction.
func (c *committer) commitTx(batch []*writeOp) {
	err := c.transaction(func(tx *gorm.DB) error { return c.runAll(tx, batch) })
	switch {
	case errors.Is(err, errOpFailed) && len(batch) > 1:
		for _, op := range batch {
			err := c.transaction(func(tx *gorm.DB) error { return c.runOne(tx, op) })
			if err != nil && !errors.Is(err, errOpFailed) {
				op.err = fmt.Errorf("commit: %w", err)
			}
		}
	case errors.Is(err, errOpFailed):
		// A batch of one: op.err is its own error.
	case err != nil:
		for _, op := range batch {
			op.err = fmt.Errorf("commit: %w", err)
		}
	}
}

// transaction runs fn in one transaction: SQLite's on the writer's
// connection held for it (stmtCache.transaction), PostgreSQL's through GORM.
func (c *committer) transaction(fn func(tx *gorm.DB) error) error {
	if c.stmts != nil {
		return c.stmts.transaction(fn)
	}
	return c.db.Transaction(fn)
}

// runAll runs the batch in order, merging runs of appends and runs of
// creates. An append merges only with appends to other conversations, so
// that each sees the writes queued before it exactly as if they ran one by
// one.
func (c *committer) runAll(tx *gorm.DB, batch []*writeOp) error {
	var apps, creates []*writeOp
	convs := map[string]bool{}
	flush := func() error {
		var err error
		switch {
		case len(apps) == 1:
			err = c.runOne(tx, apps[0])
		case len(apps) > 1:
			if err = appendAll(tx, c.stmts, apps); err != nil {
				err = errOpFailed // which append failed is found when they run alone
			}
		case len(creates) == 1:
			err = c.runOne(tx, creates[0])
		case len(creates) > 1:
			err = createAll(tx, creates)
		}
		apps, creates = apps[:0], creates[:0]
		clear(convs)
		return err
	}
	for _, op := range batch {
		switch {
		case op.app != nil:
			if len(creates) > 0 || convs[op.app.Conv.ID] {
				if err := flush(); err != nil {
					return err
				}
			}
			convs[op.app.Conv.ID] = true
			apps = append(apps, op)
		case op.conv != nil:
			if len(apps) > 0 {
				if err := flush(); err != nil {
					return err
				}
			}
			creates = append(creates, op)
		default:
			if err := flush(); err != nil {
				return err
			}
			if err := c.runOne(tx, op); err != nil {
				return err
			}
		}
	}
	return flush()
}

// createAll inserts the conversations of ops with multi-row INSERTs. A
// conversation that cannot be inserted (its key already has an active
// one) is skipped by the statement, which then fails the batch: the ops
// run alone to find which, each getting its own error.
func createAll(tx *gorm.DB, ops []*writeOp) error {
	rows := make([]*ledger.Conversation, 0, min(len(ops), stmtRows))
	for start := 0; start < len(ops); start += stmtRows {
		rows = rows[:0]
		for _, op := range ops[start:min(start+stmtRows, len(ops))] {
			rows = append(rows, op.conv)
		}
		res := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&rows)
		if res.Error != nil || res.RowsAffected != int64(len(rows)) {
			return errOpFailed
		}
	}
	return nil
}

// runOne runs one write, keeping its error on the op; a failure aborts the
// batch's transaction.
func (c *committer) runOne(tx *gorm.DB, op *writeOp) error {
	switch {
	case op.app != nil:
		op.err = appendAll(tx, c.stmts, []*writeOp{op})
	case op.conv != nil:
		op.err = tx.Create(op.conv).Error
	default:
		op.err = op.fn(tx)
	}
	if op.err != nil {
		return errOpFailed
	}
	return nil
}

// close lets queued writes finish, then stops the workers.
func (c *committer) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	close(c.queue)
	if c.appends != nil {
		close(c.appends)
	}
	c.mu.Unlock()
	c.wg.Wait()
	if c.stmts != nil {
		c.stmts.close()
	}
}

// CommitBatch is one group commit as ObserveCommits tells it: when its
// worker took it from the queue (Start), had its statements ready and
// sent them (Sent: PostgreSQL's appends' pipeline; zero elsewhere) and
// had the outcome (End), and each write of it.
type CommitBatch struct {
	Start, Sent, End time.Time
	Writes           []CommitWrite
}

// CommitWrite is one write of a batch: an append's session key ("" for
// other writes) and when it was queued (zero when it was queued before
// the observation began).
type CommitWrite struct {
	SessionKey string
	Queued     time.Time
}

// observed is batch as CommitBatch, started at start.
func (c *committer) observed(batch []*writeOp, start time.Time) CommitBatch {
	b := CommitBatch{Start: start, End: time.Now(), Writes: make([]CommitWrite, len(batch))}
	// On PostgreSQL the appends have their worker (batch[0] is one of
	// them only there), the only one that sends pipelines.
	if c.pipe != nil && len(batch) > 0 && batch[0].app != nil && c.pipe.sent.After(start) {
		b.Sent = c.pipe.sent
	}
	for i, op := range batch {
		b.Writes[i].Queued = op.queued
		if op.app != nil && op.app.Conv != nil {
			b.Writes[i].SessionKey = op.app.Conv.SessionKey
		}
	}
	return b
}

// ObserveCommits has fn told of every group commit from now on, on the
// committer's worker before the batch's writers return (so fn must be
// quick), until remove is called. One observer at a time; it costs the
// writes a clock reading each while it is set. For measurement: the
// bench's breakdown of where an append waits.
func (s *DB) ObserveCommits(fn func(CommitBatch)) (remove func()) {
	s.commit.observe.Store(&fn)
	return func() { s.commit.observe.CompareAndSwap(&fn, nil) }
}
