package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// pgCost is what a gateway turn costs PostgreSQL: transactions, round
// trips, rows and WAL per turn, at a number of clients spread over one or
// more gateway replicas sharing the database.
type pgCost struct {
	Clients  int `json:"clients"`
	Replicas int `json:"replicas"`
	Turns    int `json:"turns"`
	// TurnsPerSecond and P99Millis are the replicas' together.
	TurnsPerSecond float64 `json:"turns_per_second"`
	P99Millis      float64 `json:"p99_ms"`
	// StatXactsPerTurn: pg_stat_database (xact_commit + xact_rollback)
	// over the run ÷ turns — everything the server counted, the gateway's
	// heartbeats and leases included.
	StatXactsPerTurn float64 `json:"stat_transactions_per_turn"`
	// XactsPerTurn and RoundTripsPerTurn are the gateway's own, from a pgx
	// tracer on its pools: a statement sent outside a transaction, or a
	// BEGIN, starts one; every statement, batch and prepare is a round
	// trip.
	XactsPerTurn      float64 `json:"transactions_per_turn"`
	RoundTripsPerTurn float64 `json:"round_trips_per_turn"`
	// RowsPerTurn: rows inserted, updated and deleted in the run's schema
	// (pg_stat_user_tables) ÷ turns. WALBytesPerTurn: the server's WAL
	// written over the run (pg_current_wal_lsn, the whole cluster) ÷
	// turns.
	RowsPerTurn     float64 `json:"rows_per_turn"`
	WALBytesPerTurn float64 `json:"wal_bytes_per_turn"`
	// ConversationUpdatesHOT: the share of the updates of conversations
	// over the run that were heap-only (pg_stat_user_tables
	// n_tup_hot_upd ÷ n_tup_upd): an update that wrote no index entry.
	ConversationUpdatesHOT float64 `json:"conversation_updates_hot"`
}

// pgCounter is a pgx tracer counting round trips and transactions.
type pgCounter struct {
	roundTrips, xacts atomic.Int64
}

func (c *pgCounter) TraceQueryStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.roundTrips.Add(1)
	if conn.PgConn().TxStatus() == 'I' {
		c.xacts.Add(1)
	}
	return ctx
}

func (c *pgCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *pgCounter) TraceBatchStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.roundTrips.Add(1)
	if conn.PgConn().TxStatus() == 'I' {
		c.xacts.Add(1)
	}
	return ctx
}

func (c *pgCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *pgCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (c *pgCounter) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	c.roundTrips.Add(1)
	return ctx
}

func (c *pgCounter) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// postgresCost runs replicas gateways on one PostgreSQL schema, n
// clients spread over them, and counts what their turns cost the
// database.
func postgresCost(ctx context.Context, n, replicas int, o options) (pgCost, error) {
	admin, err := gorm.Open(postgres.Open(o.dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return pgCost{}, err
	}
	if s, err := admin.DB(); err == nil {
		defer s.Close()
	}
	counter := &pgCounter{}
	db, closeDB, err := openStoreWith(ctx, "postgres", o, store.OpenOptions{Logger: discard, Tracer: counter})
	if err != nil {
		return pgCost{}, err
	}
	// The schema is dropped (closeDB) only once the counts are read: the
	// servers' connections report their counts as they close.
	defer closeDB()
	var schema string
	if err := db.Gorm().Raw("SELECT current_schema()").Scan(&schema).Error; err != nil {
		return pgCost{}, err
	}
	// counts reads the server's counters: transactions in the database,
	// rows changed in the schema, WAL written.
	type counts struct{ xacts, rows, wal, convUpd, convHOT int64 }
	read := func() (counts, error) {
		var c counts
		err := admin.Transaction(func(tx *gorm.DB) error {
			if err := tx.Exec("SELECT pg_stat_clear_snapshot()").Error; err != nil {
				return err
			}
			if err := tx.Raw("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()").Scan(&c.xacts).Error; err != nil {
				return err
			}
			if err := tx.Raw(`SELECT COALESCE(sum(n_tup_ins + n_tup_upd + n_tup_del), 0),
				COALESCE(sum(n_tup_upd) FILTER (WHERE relname = 'conversations'), 0),
				COALESCE(sum(n_tup_hot_upd) FILTER (WHERE relname = 'conversations'), 0)
				FROM pg_stat_user_tables WHERE schemaname = ?`, schema).Row().Scan(&c.rows, &c.convUpd, &c.convHOT); err != nil {
				return err
			}
			return tx.Raw("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").Scan(&c.wal).Error
		})
		return c, err
	}
	var urls []string
	var stops []func()
	stopAll := func() {
		for _, stop := range stops {
			stop()
		}
		stops = nil
	}
	defer stopAll()
	url, stop, err := serveGateway(db, func() { db.Close() }, replicas > 1, agent.Echo{}, sessions.Policy{MaxHistory: 20})
	if err != nil {
		return pgCost{}, err
	}
	urls, stops = append(urls, url), append(stops, stop)
	sep := "?"
	if strings.Contains(o.dsn, "?") {
		sep = "&"
	}
	for range replicas - 1 {
		more, err := store.Open(ctx, store.DriverPostgres, o.dsn+sep+"search_path="+schema, store.OpenOptions{Logger: discard, Tracer: counter})
		if err != nil {
			return pgCost{}, err
		}
		url, stop, err := serveGateway(more, func() { more.Close() }, true, agent.Echo{}, sessions.Policy{MaxHistory: 20})
		if err != nil {
			return pgCost{}, err
		}
		urls, stops = append(urls, url), append(stops, stop)
	}
	// The gateways' setup is not counted: from here on, turns only.
	rt0, x0 := counter.roundTrips.Load(), counter.xacts.Load()
	before, err := read()
	if err != nil {
		return pgCost{}, err
	}
	results := make([]loadResult, len(urls))
	var wg sync.WaitGroup
	start := time.Now()
	for i, url := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = drive(ctx, url, n/len(urls), o, true, 1)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	rt, x := counter.roundTrips.Load()-rt0, counter.xacts.Load()-x0
	// The counts settle once the gateways' backends exit and report them.
	stopAll()
	after, err := settledCounts(ctx, func() (int64, error) { c, err := read(); return c.xacts, err })
	if err != nil {
		return pgCost{}, err
	}
	end, err := read()
	if err != nil {
		return pgCost{}, err
	}
	c := pgCost{Clients: n, Replicas: len(urls)}
	for _, r := range results {
		c.Turns += r.Turns
		c.P99Millis = max(c.P99Millis, r.P99Millis)
	}
	if c.Turns == 0 {
		return pgCost{}, fmt.Errorf("no turn answered at %d clients", n)
	}
	turns := float64(c.Turns)
	c.TurnsPerSecond = turns / elapsed.Seconds()
	c.StatXactsPerTurn = float64(after-before.xacts) / turns
	c.XactsPerTurn, c.RoundTripsPerTurn = float64(x)/turns, float64(rt)/turns
	c.RowsPerTurn = float64(end.rows-before.rows) / turns
	c.WALBytesPerTurn = float64(end.wal-before.wal) / turns
	if upd := end.convUpd - before.convUpd; upd > 0 {
		c.ConversationUpdatesHOT = float64(end.convHOT-before.convHOT) / float64(upd)
	}
	return c, nil
}

// settledCounts reads the server's transaction count until two reads
// 200 ms apart agree: a backend reports its counts as it exits.
func settledCounts(ctx context.Context, read func() (int64, error)) (int64, error) {
	prev, err := read()
	if err != nil {
		return 0, err
	}
	for range 25 {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		v, err := read()
		if err != nil {
			return 0, err
		}
		if v-prev <= 1 { // (the read itself is a transaction)
			return v, nil
		}
		prev = v
	}
	return prev, nil
}
