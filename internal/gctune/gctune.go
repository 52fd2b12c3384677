// Package gctune sets the garbage collector's pace for chatgate's
// processes when the environment leaves it to them.
package gctune

import (
	"runtime/debug"
	"strconv"
)

// Percent is the GOGC chatgate runs with when GOGC is not set: a
// collection when the heap has grown by twice what the last one kept,
// where Go's default is once. A turn allocates a few kilobytes that die
// with it, so a gateway under load spends a share of its CPU collecting;
// at 200 it collects half as often. The bench measured 5-6 % more turns
// at 500 clients and a shorter tail, for a peak RSS about a quarter larger
// (docs/performance.md, "The collector's pace").
// GOMEMLIMIT, when set, still bounds the heap: near the limit the
// collector runs as often as it must, whatever the percent.
const Percent = 200

// Apply sets the collector to Percent unless getenv("GOGC") is set, in
// which case the runtime has read it already. It returns the percent in
// force and where it came from: "GOGC" or "chatgate default".
func Apply(getenv func(string) string) (percent int, from string) {
	if v := getenv("GOGC"); v != "" {
		if v == "off" {
			return -1, "GOGC"
		}
		p, _ := strconv.Atoi(v)
		return p, "GOGC"
	}
	debug.SetGCPercent(Percent)
	return Percent, "chatgate default"
}
