package gctune

import (
	"runtime/debug"
	"testing"
)

// current reads the collector's percent without changing it.
func current() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

func TestApplySetsTheDefaultWhenGOGCIsUnset(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	p, from := Apply(func(string) string { return "" })
	if p != Percent || from != "chatgate default" {
		t.Fatalf("Apply = %d, %q; want %d, chatgate default", p, from, Percent)
	}
	if got := current(); got != Percent {
		t.Fatalf("collector percent = %d, want %d", got, Percent)
	}
}

func TestApplyLeavesAnOperatorsGOGC(t *testing.T) {
	before := debug.SetGCPercent(150) // as the runtime set it from GOGC=150
	defer debug.SetGCPercent(before)
	env := map[string]string{"GOGC": "150"}
	p, from := Apply(func(k string) string { return env[k] })
	if p != 150 || from != "GOGC" {
		t.Fatalf("Apply = %d, %q; want 150, GOGC", p, from)
	}
	if got := current(); got != 150 {
		t.Fatalf("collector percent = %d, want the operator's 150", got)
	}
	env["GOGC"] = "off"
	if p, _ := Apply(func(k string) string { return env[k] }); p != -1 {
		t.Fatalf("Apply with GOGC=off = %d, want -1", p)
	}
}
