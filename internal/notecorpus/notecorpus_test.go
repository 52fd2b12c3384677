package notecorpus

import (
	"slices"
	"testing"
)

// The same seed makes the same texts, another seed others; notes are one
// short fact each.
func TestCorpus(t *testing.T) {
	a, b := Notes(1, 500), Notes(1, 500)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed made other notes")
	}
	if slices.Equal(a, Notes(2, 500)) {
		t.Fatal("another seed made the same notes")
	}
	distinct := map[string]bool{}
	for _, n := range a {
		if len(n) < 30 || len(n) > 90 {
			t.Errorf("note of %d bytes: %q", len(n), n)
		}
		distinct[n] = true
	}
	if len(distinct) < 400 {
		t.Errorf("%d distinct notes of 500", len(distinct))
	}
	m := Messages(1, 100)
	if !slices.Equal(m, Messages(1, 100)) || len(m) != 100 {
		t.Fatal("messages differ for the same seed")
	}
}
