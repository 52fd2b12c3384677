package agent

import (
	"context"
	"strings"
	"testing"
)

func TestEchoBurst(t *testing.T) {
	r, err := Echo{}.Reply(context.Background(), Request{Earlier: []string{"hi", "quick question"}, Input: "how do I reset?",
		History: []Message{{Role: RoleUser, Content: "a"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "echo: hi\nquick question\nhow do I reset? (history: 1)"; r.Text() != want {
		t.Fatalf("echo = %q, want %q", r.Text(), want)
	}
}

func TestEcho(t *testing.T) {
	var deltas []string
	r, err := Echo{}.Reply(context.Background(), Request{
		Input:   "hi",
		History: []Message{{Role: RoleUser, Content: "a"}, {Role: RoleAssistant, Content: "b"}},
	}, func(s string) { deltas = append(deltas, s) })
	if err != nil {
		t.Fatal(err)
	}
	if r.Text() != "echo: hi (history: 2)" {
		t.Fatalf("echo = %q", r.Text())
	}
	if strings.Join(deltas, "") != r.Text() {
		t.Fatalf("deltas %q do not add up to the reply", deltas)
	}
}
