package mcpclient

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatgate/chatgate/tools"
)

// render is a tool's result as the model gets it: the texts joined by
// newlines, other content described in a line of its own, the
// structured content as JSON when there is no text, all cut to max
// bytes.
func render(res *mcp.CallToolResult, max int) tools.Result {
	var parts []string
	texts := 0
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
			texts++
		case *mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes]", orUnknown(c.MIMEType), len(c.Data)))
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes]", orUnknown(c.MIMEType), len(c.Data)))
		case *mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource link %s %s]", c.Name, c.URI))
		case *mcp.EmbeddedResource:
			parts = append(parts, embedded(c.Resource))
			if c.Resource != nil && c.Resource.Text != "" {
				texts++
			}
		default:
			parts = append(parts, fmt.Sprintf("[%T content]", c))
		}
	}
	if texts == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			parts = append(parts, string(b))
		}
	}
	text := strings.Join(parts, "\n")
	if text == "" && res.IsError {
		text = "the tool reported an error"
	}
	out := tools.Result{IsError: res.IsError}
	out.Text, out.Cut = cut(text, max)
	return out
}

func embedded(r *mcp.ResourceContents) string {
	switch {
	case r == nil:
		return "[resource]"
	case r.Text != "":
		return fmt.Sprintf("[resource %s]\n%s", r.URI, r.Text)
	default:
		return fmt.Sprintf("[resource %s %s, %d bytes]", r.URI, orUnknown(r.MIMEType), len(r.Blob))
	}
}

func orUnknown(mime string) string {
	if mime == "" {
		return "of unknown type"
	}
	return mime
}

// cut shortens text to at most max bytes, at a UTF-8 boundary, and adds
// a note saying so (the note is not counted in max).
func cut(text string, max int) (string, bool) {
	if max <= 0 || len(text) <= max {
		return text, false
	}
	n := max
	for n > 0 && !utf8.RuneStart(text[n]) {
		n--
	}
	return fmt.Sprintf("%s\n[result cut: %d of %d bytes shown]", text[:n], n, len(text)), true
}
