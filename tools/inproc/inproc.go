// Package inproc serves the gateway's own MCP servers (reminders, memory)
// in the process, over the SDK's in-memory transport: the gateway's MCP
// client calls them as any other server, so their calls go through the
// same tool ledger, approval, metrics and tool frames.
package inproc

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Connect serves s in the process and returns the client's end of the
// in-memory transport (mcpclient.ServerConfig.Transport) and how to close
// the server's session; what names the server in an error.
func Connect(ctx context.Context, s *mcp.Server, what string) (mcp.Transport, func() error, error) {
	client, server := mcp.NewInMemoryTransports()
	ss, err := s.Connect(ctx, server, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("serve the %s: %w", what, err)
	}
	return client, ss.Close, nil
}

// Text is a tool's result of one text.
func Text(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}
