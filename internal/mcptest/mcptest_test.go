package mcptest_test

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatgate/chatgate/internal/mcptest"
)

func TestCounterCountsByKeyAndCallsAreRecorded(t *testing.T) {
	srv, tr := mcptest.InMemory(t)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, key := range []string{"a", "b", "a"} {
		if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{
			Name: mcptest.Counter, Arguments: map[string]any{"key": key}, Meta: mcp.Meta{"k": key},
		}); err != nil {
			t.Fatal(err)
		}
	}
	if c := srv.Counts(); c["a"] != 2 || c["b"] != 1 || srv.Count() != 3 {
		t.Errorf("counts %v, total %d", c, srv.Count())
	}
	calls := srv.Calls()
	if mcptest.Of(calls, mcptest.Counter) != 3 || calls[1].Meta["k"] != "b" || !calls[2].Done || string(calls[0].Arguments) != `{"key":"a"}` {
		t.Errorf("calls %+v", calls)
	}
}
