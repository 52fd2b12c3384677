package ratelimit

import (
	"fmt"
	"testing"
	"time"
)

func TestKeysShareNothingAndGlobalCeiling(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := New(Options{PerSecond: 1, Burst: 3, GlobalPerSecond: 1, GlobalBurst: 5, KeyLimit: "principal", Now: func() time.Time { return now }})
	var got []string
	for i := 0; i < 4; i++ {
		got = append(got, l.Allow("a"))
	}
	for i := 0; i < 4; i++ {
		got = append(got, l.Allow("b"))
	}
	want := []string{"", "", "", "principal", "", "", "global", "global"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	// The refusals took nothing: one second refills one token of each.
	now = now.Add(time.Second)
	if r := l.Allow("b"); r != "" {
		t.Fatalf("after a second b got %q", r)
	}
	if r := l.Allow("c"); r != "global" {
		t.Fatalf("c got %q, want global (the ceiling refilled one token, b took it)", r)
	}
}

func TestKeysAreBounded(t *testing.T) {
	l := New(Options{PerSecond: 1, Burst: 1, MaxKeys: 10})
	for i := 0; i < 1000; i++ {
		l.Allow(fmt.Sprint(i))
	}
	if l.Len() != 10 {
		t.Fatalf("%d buckets kept, want 10", l.Len())
	}
}

// TestSetChangesKeptBuckets lowers and raises the limits of a running
// Limiter: buckets already kept follow at once, without a refill.
func TestSetChangesKeptBuckets(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := New(Options{PerSecond: 1, Burst: 5, KeyLimit: "principal", Now: func() time.Time { return now }})
	l.Allow("a") // a keeps 4 tokens
	l.Set(1, 2, 0, 0)
	var got []string
	for i := 0; i < 3; i++ {
		got = append(got, l.Allow("a"))
	}
	if want := []string{"", "", "principal"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after lowering the burst to 2: %q, want %q", got, want)
	}
	// A new ceiling applies to every key.
	l.Set(1, 2, 1, 1)
	if r := l.Allow("b"); r != "" {
		t.Fatalf("b got %q", r)
	}
	if r := l.Allow("c"); r != "global" {
		t.Fatalf("c got %q, want global", r)
	}
	// Raising the rate: a's empty bucket refills faster.
	l.Set(10, 2, 0, 0)
	now = now.Add(100 * time.Millisecond)
	if r := l.Allow("a"); r != "" {
		t.Fatalf("a after 100ms at 10/s got %q", r)
	}
}
