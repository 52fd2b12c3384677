package sessions

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
)

// BenchmarkTurn measures one turn (lock, load, store the user message, echo
// agent, store the reply) on a SQLite file, for one user in sequence and for
// many users in parallel, where group commit shares transactions.
func BenchmarkTurn(b *testing.B) {
	run := func(b *testing.B, parallel bool) {
		db := openStore(b, DriverSQLite, filepath.Join(b.TempDir(), "bench.db"))
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
