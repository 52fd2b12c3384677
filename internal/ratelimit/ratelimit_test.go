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
