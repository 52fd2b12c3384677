package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// crossReplica measures what cross-replica delivery adds to a reply: two
// gateways in this process share one PostgreSQL schema; each user has a
// client on replica A, which sends, and one on replica B. A sends the
// reply frame to its client as soon as the reply is stored; B gets it
// through LISTEN/NOTIFY and storage. The latency of a turn is the reply's
// arrival at B's client minus its arrival at A's: what a client connected
// to the other replica waits more.
func crossReplica(ctx context.Context, o options) (loadResult, error) {
	admin, err := gorm.Open(postgres.Open(o.dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return loadResult{}, err
	}
	defer func() {
		if s, err := admin.DB(); err == nil {
			s.Close()
		}
	}()
	schema := "bench_" + shortID()
	if err := admin.Exec("CREATE SCHEMA " + schema).Error; err != nil {
		return loadResult{}, err
	}
	defer admin.Exec("DROP SCHEMA " + schema + " CASCADE")
	sep := "?"
	if strings.Contains(o.dsn, "?") {
		sep = "&"
	}
	dsn := o.dsn + sep + "search_path=" + schema
	var urls []string
	for range 2 {
		url, stop, err := replicaServer(ctx, dsn)
		if err != nil {
			return loadResult{}, err
		}
		defer stop()
		urls = append(urls, url)
	}

	users, turns := 8, 125
	if o.quick {
		users, turns = 4, 50
	}
	var mu sync.Mutex
	var lat []time.Duration
	errs := 0
	var wg sync.WaitGroup
	start := time.Now()
	for u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine, n := crossUser(ctx, urls, fmt.Sprintf("cross-%d-%s", u, shortID()), turns)
			mu.Lock()
			lat = append(lat, mine...)
			errs += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	return summarize(users, lat, time.Since(start), errs), nil
}

// replicaServer runs one gateway on dsn, listening for the other's events.
func replicaServer(ctx context.Context, dsn string) (string, func(), error) {
	db, err := store.Open(ctx, store.DriverPostgres, dsn, store.OpenOptions{Logger: discard})
	if err != nil {
		return "", nil, err
	}
	return serveGateway(db, func() { db.Close() }, true, agent.Echo{}, sessions.Policy{MaxHistory: 20})
}

// crossUser runs one user's turns: sent on A, timed at A's and B's
// clients. It returns the added latencies and the turns that failed.
func crossUser(ctx context.Context, urls []string, user string, turns int) ([]time.Duration, int) {
	dialer := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	var conns []*websocket.Conn
	for _, url := range urls {
		c, _, err := dialer.DialContext(ctx, url, nil)
		if err != nil {
			return nil, turns
		}
		defer c.Close()
		var ready map[string]any
		if c.WriteJSON(map[string]any{"type": "hello", "user": user}) != nil || c.ReadJSON(&ready) != nil {
			return nil, turns
		}
		conns = append(conns, c)
	}
	a, b := conns[0], conns[1]
	// B's frames are read as they come, each reply's arrival noted by seq.
	arrived := make(chan seqAt, turns)
	go func() {
		for {
			var f struct {
				Type string `json:"type"`
				Seq  int64  `json:"seq"`
			}
			if b.ReadJSON(&f) != nil {
				close(arrived)
				return
			}
			if f.Type == "reply" {
				arrived <- seqAt{f.Seq, time.Now()}
			}
		}
	}()
	var lat []time.Duration
	failed := 0
	for m := range turns {
		if a.WriteJSON(map[string]any{"type": "message", "id": fmt.Sprint("m", m), "text": "hello gateway"}) != nil {
			return lat, failed + turns - m
		}
		var seq int64
		var atA time.Time
		for seq == 0 {
			a.SetReadDeadline(time.Now().Add(30 * time.Second))
			var f struct {
				Type string `json:"type"`
				Seq  int64  `json:"seq"`
			}
			if a.ReadJSON(&f) != nil {
				return lat, failed + turns - m
			}
			if f.Type == "reply" {
				seq, atA = f.Seq, time.Now()
			}
		}
		t := time.NewTimer(5 * time.Second)
	wait:
		for {
			select {
			case got, ok := <-arrived:
				if !ok {
					t.Stop()
					return lat, failed + turns - m
				}
				if got.seq == seq {
					lat = append(lat, max(0, got.at.Sub(atA)))
					break wait
				}
			case <-t.C:
				failed++ // never forwarded: counted, and the next turn goes on
				break wait
			}
		}
		t.Stop()
	}
	return lat, failed
}

type seqAt struct {
	seq int64
	at  time.Time
}
