package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/agent/openai"
)

// The breakdown's model server runs in a child process and hands its
// clocks over at /clocks: each request's times come back with the
// transport's, in order, and a take starts both over.
func TestModelServerClocks(t *testing.T) {
	ctx := context.Background()
	const firstChunk = 5 * time.Millisecond
	base, stop, err := timedLLM(firstChunk, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	clock := &modelClock{}
	ag := openai.New(openai.Config{BaseURL: base, APIKey: "bench", Model: "mock", Timeout: time.Minute, Stream: true,
		HTTPClient: &http.Client{Transport: &timedTransport{next: http.DefaultTransport.(*http.Transport).Clone(), clock: clock}}})
	for range 2 {
		if _, err := ag.Reply(ctx, agent.Request{SessionKey: "k", Input: "hello"}, func(string) {}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := takeClocks(ctx, base, clock)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.sent) != 2 || len(got.arrived) != 2 || len(got.read) != 2 || len(got.first) != 2 || len(got.bytes) != 2 || len(got.messages) != 2 {
		t.Fatalf("want two requests' times, got %d sent, %d arrived, %d read, %d first, %d sizes, %d counts",
			len(got.sent), len(got.arrived), len(got.read), len(got.first), len(got.bytes), len(got.messages))
	}
	for i := range 2 {
		if got.arrived[i].Before(got.sent[i]) || got.read[i].Before(got.arrived[i]) || got.first[i].Sub(got.read[i]) < firstChunk {
			t.Errorf("request %d: sent %v, arrived %v, read %v, first %v: out of order, or the first chunk before its wait",
				i, got.sent[i], got.arrived[i], got.read[i], got.first[i])
		}
		if got.bytes[i] == 0 || got.messages[i] != 1 {
			t.Errorf("request %d: %d bytes, %d messages; want a body with the one user message", i, got.bytes[i], got.messages[i])
		}
	}
	if i := 1; !got.sent[0].Before(got.sent[i]) || !got.arrived[0].Before(got.arrived[i]) {
		t.Errorf("requests out of order: sent %v, arrived %v", got.sent, got.arrived)
	}
	again, err := takeClocks(ctx, base, clock)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.sent)+len(again.arrived) != 0 {
		t.Fatalf("a second take returned %d sent, %d arrived; want both started over", len(again.sent), len(again.arrived))
	}
}
