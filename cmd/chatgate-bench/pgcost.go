package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions"
)

// pgCost is what a gateway turn costs PostgreSQL: transactions and round
// trips per turn, at a number of clients.
type pgCost struct {
	Clients int `json:"clients"`
	Turns   int `json:"turns"`
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

// postgresCost runs the gateway on PostgreSQL at n clients and counts
// what its turns cost the database.
func postgresCost(ctx context.Context, n int, o options) (pgCost, error) {
	admin, err := gorm.Open(postgres.Open(o.dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return pgCost{}, err
	}
	if s, err := admin.DB(); err == nil {
		defer s.Close()
	}
	xacts := func() (int64, error) {
		var v int64
		err := admin.Transaction(func(tx *gorm.DB) error {
			if err := tx.Exec("SELECT pg_stat_clear_snapshot()").Error; err != nil {
				return err
			}
			return tx.Raw("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()").Scan(&v).Error
		})
		return v, err
	}
	counter := &pgCounter{}
	db, closeDB, err := openStoreWith(ctx, "postgres", o, sessions.OpenOptions{Logger: discard, Tracer: counter})
	if err != nil {
		return pgCost{}, err
	}
	url, stop, err := serveGateway(db, closeDB, false, agent.Echo{}, sessions.Policy{MaxHistory: 20})
	if err != nil {
		return pgCost{}, err
	}
	// The gateway's setup is not counted: from here on, turns only.
	rt0, x0 := counter.roundTrips.Load(), counter.xacts.Load()
	before, err := xacts()
	if err != nil {
		stop()
		return pgCost{}, err
	}
	l := drive(ctx, url, n, o, true, 1)
	rt, x := counter.roundTrips.Load()-rt0, counter.xacts.Load()-x0
	stop() // its backends exit, and report their counts
	after, err := settledXacts(ctx, xacts)
	if err != nil {
		return pgCost{}, err
	}
	if l.Turns == 0 {
		return pgCost{}, fmt.Errorf("no turn answered at %d clients", n)
	}
	turns := float64(l.Turns)
	return pgCost{Clients: n, Turns: l.Turns, StatXactsPerTurn: float64(after-before) / turns,
		XactsPerTurn: float64(x) / turns, RoundTripsPerTurn: float64(rt) / turns}, nil
}

// settledXacts reads the server's transaction count until two reads
// 200 ms apart agree: a backend reports its counts as it exits.
func settledXacts(ctx context.Context, read func() (int64, error)) (int64, error) {
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
