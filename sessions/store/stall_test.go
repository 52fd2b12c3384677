package store

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// stallTimeout is the stores' request timeout in these tests.
const stallTimeout = 300 * time.Millisecond

// hangBound is how long a call may take on a stalled database before the
// test calls it hung: many times the timeout, so that only a call that
// waits for an answer that never comes can reach it.
const hangBound = 60 * time.Second

// openThrough opens a PostgreSQL store that reaches its server through
// proxy, its requests bounded by stallTimeout.
func openThrough(t *testing.T, proxy *pgtest.Proxy) *DB {
	t.Helper()
	db, err := Open(context.Background(), DriverPostgres, proxy.DSN, OpenOptions{Logger: quiet, Timeout: stallTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// A PostgreSQL that stops answering without closing anything (every byte
// dropped both ways, the connections left open) fails each of the store's
// requests within its timeout, whichever path it takes — the appends'
// pipeline, a group-committed transaction, a read, a claim, a mark, a
// lease, a heartbeat — though no caller gave it a deadline; and once the
// database answers again the same store works, with no restart. Without
// the deadline each call would wait for an answer the network lost.
func TestStalledDatabaseFailsEveryRequest(t *testing.T) {
	dsn := postgresDSN(t)
	proxy := pgtest.StartProxy(t, dsn)
	db := openThrough(t, proxy)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	conv := &ledger.Conversation{ID: "00000000-0000-0000-0000-00000000057a", SessionKey: "websocket:stall", Channel: "websocket",
		Status: ledger.StatusActive, StartedAt: now, LastActivityAt: now}
	if err := db.CreateConversation(ctx, conv); err != nil {
		t.Fatal(err)
	}
	user := func(seq int64, text string) ledger.Message {
		return ledger.Message{ConversationID: conv.ID, Seq: seq, Role: "user", Content: text, Status: ledger.MsgOK, CreatedAt: now,
			TurnState: ledger.TurnPending}
	}
	if err := db.Append(ctx, ledger.Append{Conv: conv, Messages: []ledger.Message{user(1, "before")}, At: now}); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"append": func() error {
			return db.Append(ctx, ledger.Append{Conv: conv, ExpectSeq: 1, Messages: []ledger.Message{user(2, "while stalled")}, At: now})
		},
		"create conversation": func() error {
			return db.CreateConversation(ctx, &ledger.Conversation{ID: "00000000-0000-0000-0000-00000000057b", SessionKey: "websocket:other",
				Channel: "websocket", Status: ledger.StatusActive, StartedAt: now, LastActivityAt: now})
		},
		"read messages": func() error { _, err := db.RecentMessages(ctx, conv.ID, 20); return err },
		"claim":         func() error { _, err := db.ClaimTurn(ctx, conv.ID, 1, "", 0, "replica-a", now); return err },
		"mark delivered": func() error {
			return db.MarkDelivered(ctx, conv.ID, 1, "replica-a", 1, "ref", "", now)
		},
		"heartbeat": func() error { return db.Heartbeat(ctx, "replica-a", now) },
		"lease": func() error {
			release, err := db.Lease(ctx, "websocket:stall", "replica-a", 30*time.Second)
			if err == nil {
				release()
			}
			return err
		},
	}
	type result struct {
		name string
		err  error
		took time.Duration
	}
	// Two rounds: one whose requests go out on connections just used, and
	// one after the pool's connections sat idle past a second, which pgx
	// pings before database/sql hands them out again.
	for _, round := range []string{"busy connections", "idle connections"} {
		if round == "idle connections" {
			time.Sleep(1100 * time.Millisecond) // pgx measures the idle time on the wall clock
		}
		proxy.Stall(t)
		results := make(chan result, len(calls))
		for name, call := range calls {
			go func() {
				start := time.Now()
				err := call()
				results <- result{name, err, time.Since(start)}
			}()
		}
		pending := map[string]bool{}
		for name := range calls {
			pending[name] = true
		}
		bound := time.After(hangBound)
		var slowest result
		for range calls {
			select {
			case r := <-results:
				delete(pending, r.name)
				if r.took > slowest.took {
					slowest = r
				}
				if r.err == nil {
					t.Errorf("%s: %s succeeded on a database that answers nothing", round, r.name)
				}
			case <-bound:
				t.Fatalf("%s: still waiting %s after the database stalled: %v", round, hangBound, pending)
			}
		}
		t.Logf("%s: every call failed; the slowest, %s, after %s (timeout %s)", round, slowest.name, slowest.took.Round(time.Millisecond), stallTimeout)
		proxy.Heal(t)

		// The same store works again: the connections the deadline closed
		// are replaced, and the append the caller would retry lands.
		got, err := db.Conversation(ctx, conv.ID)
		if err != nil {
			t.Fatalf("%s: reading the conversation once the database answers: %v", round, err)
		}
		text := "after " + round
		next := user(got.LastSeq+1, text)
		if err := db.Append(ctx, ledger.Append{Conv: got, ExpectSeq: got.LastSeq, Messages: []ledger.Message{next}, At: now}); err != nil {
			t.Fatalf("%s: appending once the database answers: %v", round, err)
		}
		msgs, err := db.RecentMessages(ctx, conv.ID, 20)
		if err != nil || len(msgs) == 0 || msgs[len(msgs)-1].Content != text {
			t.Fatalf("%s: messages once the database answers = %v, %v; want the last one stored", round, contents(msgs), err)
		}
		release, err := db.Lease(ctx, "websocket:stall", "replica-a", 30*time.Second)
		if err != nil {
			t.Fatalf("%s: taking a lease once the database answers: %v", round, err)
		}
		release()
	}
}

func contents(msgs []ledger.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = fmt.Sprintf("%d:%s", m.Seq, m.Content)
	}
	return out
}

// Connections the server closed while they sat idle (a restart, an
// administrator's pg_terminate_backend, an idle timeout) cost a caller
// nothing: the check before reuse finds each dead, and database/sql takes
// another, on every path — the appends' pipeline, which takes its
// connection with db.Conn, as well as plain statements.
func TestIdleConnectionsClosedByTheServerAreReplaced(t *testing.T) {
	db := openStore(t, DriverPostgres, postgresDSN(t))
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	conv := &ledger.Conversation{ID: "00000000-0000-0000-0000-0000000005c1", SessionKey: "websocket:idle", Channel: "websocket",
		Status: ledger.StatusActive, StartedAt: now, LastActivityAt: now}
	if err := db.CreateConversation(ctx, conv); err != nil {
		t.Fatal(err)
	}
	// Every connection the pool holds, taken at once so that each is a
	// different one, and its backend's pid; then all given back, idle.
	sqlDB, _ := db.write.DB()
	var conns []*sql.Conn
	var pids []int64
	for len(conns) == 0 || sqlDB.Stats().Idle > 0 {
		c, err := sqlDB.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		var pid int64
		if err := c.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	for _, c := range conns {
		c.Close()
	}
	var killed int64
	if err := db.leases.pool.QueryRowContext(ctx, "SELECT count(*) FILTER (WHERE pg_terminate_backend(p::int)) FROM unnest($1::bigint[]) AS p", pids).Scan(&killed); err != nil || killed != int64(len(pids)) {
		t.Fatalf("terminate the pool's %d backends: %d, %v", len(pids), killed, err)
	}
	time.Sleep(1100 * time.Millisecond) // idle past a second (pgx's wall clock), so that each is checked before reuse
	for i := range 3 {
		a := ledger.Append{Conv: conv, ExpectSeq: int64(i), Messages: []ledger.Message{{ConversationID: conv.ID, Seq: int64(i + 1), Role: "user",
			Content: fmt.Sprint("after the kill ", i), Status: ledger.MsgOK, CreatedAt: now}}, At: now}
		if err := db.Append(ctx, a); err != nil {
			t.Fatalf("append %d after the server closed the pool's idle connections: %v", i, err)
		}
		if _, err := db.RecentMessages(ctx, conv.ID, 5); err != nil {
			t.Fatalf("read %d after the server closed the pool's idle connections: %v", i, err)
		}
	}
}
