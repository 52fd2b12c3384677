package sessions

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// BenchmarkTurn measures one turn (lock, load, store the user message, echo
// agent, store the reply) on a SQLite file, for one user in sequence and for
// many users in parallel, where group commit shares transactions.
func BenchmarkTurn(b *testing.B) {
	run := func(b *testing.B, parallel bool) {
		db := openStore(b, store.DriverSQLite, filepath.Join(b.TempDir(), "bench.db"))
		m := New(db, agent.Echo{}, Options{Logger: quiet, Policies: map[string]Policy{"websocket": {MaxHistory: 20}}})
		b.Cleanup(func() { m.Shutdown(context.Background()) })
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		if parallel {
			b.SetParallelism(32) // 64 concurrent users on 2 cores
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				key := fmt.Sprint("websocket:u", n.Add(1))
				for pb.Next() {
					if _, err := m.Handle(ctx, msg(key, "hello"), Hooks{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		} else {
			for i := 0; i < b.N; i++ {
				if _, err := m.Handle(ctx, msg("websocket:ann", "hello"), Hooks{}); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "turns/s")
	}
	b.Run("sqlite/one-user", func(b *testing.B) { run(b, false) })
	b.Run("sqlite/64-users", func(b *testing.B) { run(b, true) })
}

// benchLongConversations runs bench, on both databases, over one
// conversation of 100, 1,000 and 5,000 answered turns stored through m
// (WebSocket turns: not tracked).
func benchLongConversations(b *testing.B, bench func(b *testing.B, db *store.DB, m *Manager, conv string)) {
	for _, driver := range []string{store.DriverSQLite, store.DriverPostgres} {
		for _, n := range []int{100, 1000, 5000} {
			b.Run(fmt.Sprintf("%s/%d-turns", driver, n), func(b *testing.B) {
				dsn := filepath.Join(b.TempDir(), "bench.db")
				if driver == store.DriverPostgres {
					dsn = postgresDSN(b)
				}
				db := openStore(b, driver, dsn)
				m := New(db, agent.Echo{}, Options{Logger: quiet, Policies: map[string]Policy{"websocket": {MaxHistory: 20}}})
				var conv string
				for range n {
					out, err := m.Handle(context.Background(), msg("websocket:ann", "hello"), Hooks{})
					if err != nil {
						b.Fatal(err)
					}
					conv = out.ConversationID
				}
				bench(b, db, m, conv)
			})
		}
	}
}

// BenchmarkClaimLongConversation measures a claim that finds nothing to
// take in a conversation of n answered turns: what a burst's claim pays
// for the conversation's length. A claim reads the open turns only
// (ix_messages_open), so its cost should not grow with n
// (docs/performance.md, "Open turns are indexed").
func BenchmarkClaimLongConversation(b *testing.B) {
	benchLongConversations(b, func(b *testing.B, db *store.DB, m *Manager, conv string) {
		ctx := context.Background()
		defer m.Shutdown(ctx)
		c := ledger.Claim{ConversationID: conv, Owner: m.opts.ReplicaID, TakeOver: true, Alive: []string{m.opts.ReplicaID}, Limit: 20}
		b.ResetTimer()
		for range b.N {
			c.Now = time.Now()
			got, err := db.ClaimBatch(ctx, c)
			if err != nil {
				b.Fatal(err)
			}
			if got != nil {
				b.Fatalf("claimed %d answered turns", len(got.Rows))
			}
		}
	})
}

// BenchmarkOrphanScan measures the rescuer's scan for turns of gone
// replicas over a conversation of n answered turns stored by a replica
// that is gone: what every start pays (a full pass over the recovery
// horizon) for the answered turns of the process before it.
func BenchmarkOrphanScan(b *testing.B) {
	benchLongConversations(b, func(b *testing.B, db *store.DB, m *Manager, _ string) {
		ctx := context.Background()
		m.Shutdown(ctx)
		since := time.Now().Add(-ledger.RecoveryHorizon)
		b.ResetTimer()
		for range b.N {
			got, err := db.OrphanTurns(ctx, since, []string{"next"}, 100)
			if err != nil {
				b.Fatal(err)
			}
			if len(got) != 0 {
				b.Fatalf("found %d answered turns", len(got))
			}
		}
	})
}
