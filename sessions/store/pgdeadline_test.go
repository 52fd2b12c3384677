package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Each traced request runs under a deadline of the timeout (maintenance
// under maintenanceFactor times it), a caller's shorter one stands, and the request's end releases it; a nested request
// (a prepare inside an exec) releases only its own.
func TestDeadlinesBoundEachRequest(t *testing.T) {
	d := deadlines{time.Minute}
	before := time.Now()
	outer := d.TraceQueryStart(context.Background(), nil, pgx.TraceQueryStartData{})
	dl, ok := outer.Deadline()
	if !ok || dl.Before(before.Add(time.Minute)) || dl.After(time.Now().Add(time.Minute)) {
		t.Fatalf("request deadline = %v, %v; want a minute from its start", dl, ok)
	}
	inner := d.TracePrepareStart(outer, nil, pgx.TracePrepareStartData{})
	d.TracePrepareEnd(inner, nil, pgx.TracePrepareEndData{})
	if !errors.Is(inner.Err(), context.Canceled) || outer.Err() != nil {
		t.Fatalf("after the nested end: inner %v, outer %v; want canceled, live", inner.Err(), outer.Err())
	}
	d.TraceQueryEnd(outer, nil, pgx.TraceQueryEndData{})
	if !errors.Is(outer.Err(), context.Canceled) {
		t.Fatalf("after the request's end: %v, want canceled", outer.Err())
	}

	before = time.Now()
	long := d.TraceQueryStart(maintenance(context.Background()), nil, pgx.TraceQueryStartData{})
	if dl, ok := long.Deadline(); !ok || dl.Before(before.Add(maintenanceFactor*time.Minute)) || dl.After(time.Now().Add(maintenanceFactor*time.Minute)) {
		t.Fatalf("maintenance request deadline = %v, %v; want %d minutes from its start", dl, ok, maintenanceFactor)
	}
	d.TraceQueryEnd(long, nil, pgx.TraceQueryEndData{})

	caller, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	want, _ := caller.Deadline()
	req := d.TraceBatchStart(caller, nil, pgx.TraceBatchStartData{})
	if got, _ := req.Deadline(); !got.Equal(want) {
		t.Fatalf("request deadline under a caller's 1 s = %v, want the caller's %v", got, want)
	}
	d.TraceBatchEnd(req, nil, pgx.TraceBatchEndData{})
	if caller.Err() != nil {
		t.Fatalf("the request's end canceled its caller: %v", caller.Err())
	}
}

// BenchmarkDeadline is what the deadline adds to one request: a timer
// armed and stopped, two contexts.
func BenchmarkDeadline(b *testing.B) {
	d := deadlines{DefaultTimeout}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		d.TraceQueryEnd(d.TraceQueryStart(ctx, nil, pgx.TraceQueryStartData{}), nil, pgx.TraceQueryEndData{})
	}
}
