package store

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/notecorpus"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// BenchmarkNotesFor times a turn's read of a user's notes (NotesFor, as
// sessions asks it: 32 relevant, then 32 newest) and the recall tool's
// (RecallNotes, 20), for a user with 100 notes and one with 10,000, in a
// table that holds 100 other users' 100 notes each; the queries are user
// messages (internal/notecorpus). cmd/chatgate-bench -memory-only reports
// the same reads' p50 and p99; this is the one to profile:
//
//	go test -run '^$' -bench NotesFor -cpuprofile cpu.out ./sessions/store/
func BenchmarkNotesFor(b *testing.B) {
	for _, driver := range []string{DriverSQLite, DriverPostgres} {
		b.Run(driver, func(b *testing.B) {
			dsn := filepath.Join(b.TempDir(), "gateway.db")
			if driver == DriverPostgres {
				dsn = postgresDSN(b)
			}
			db := openStore(b, driver, dsn)
			ctx := context.Background()
			seed := func(user string, n int, corpus uint64) {
				texts := notecorpus.Notes(corpus, n)
				rows := make([]ledger.Note, len(texts))
				t0 := time.Now().Add(-time.Duration(n) * time.Minute)
				for i, text := range texts {
					rows[i] = ledger.Note{UserKey: user, Text: text, Author: ledger.NoteByModel, CreatedAt: t0.Add(time.Duration(i) * time.Minute)}
				}
				if err := db.Gorm().CreateInBatches(&rows, 64).Error; err != nil {
					b.Fatal(err)
				}
			}
			for i := range 100 {
				seed(fmt.Sprint("websocket:other-", i), 100, uint64(100+i))
			}
			seed("websocket:big", 10_000, 99)
			if driver == DriverPostgres {
				db.Gorm().Exec("ANALYZE notes")
			}
			queries := notecorpus.Messages(11, 256)
			for _, c := range []struct {
				user  string
				notes int
			}{{"websocket:other-0", 100}, {"websocket:big", 10_000}} {
				for _, r := range []struct {
					name  string
					limit int
					read  func(ctx context.Context, user, query string, limit int) ([]ledger.Note, error)
				}{{"NotesFor", 32, db.NotesFor}, {"RecallNotes", 20, db.RecallNotes}} {
					b.Run(fmt.Sprintf("%s/%d_notes", r.name, c.notes), func(b *testing.B) {
						rows := 0
						for i := 0; b.Loop(); i++ {
							got, err := r.read(ctx, c.user, queries[i%len(queries)], r.limit)
							if err != nil {
								b.Fatal(err)
							}
							rows += len(got)
						}
						b.ReportMetric(float64(rows)/float64(b.N), "rows/op")
					})
				}
			}
		})
	}
}
