package mcpclient

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path"
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
	var media []tools.Media
	texts := 0
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
			texts++
		case *mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes]", orUnknown(c.MIMEType), len(c.Data)))
			media = append(media, tools.Media{Kind: tools.MediaImage, Mime: c.MIMEType, Data: c.Data})
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes]", orUnknown(c.MIMEType), len(c.Data)))
			media = append(media, tools.Media{Kind: tools.MediaAudio, Mime: c.MIMEType, Data: c.Data})
		case *mcp.ResourceLink:
			// Offered as a link, as text: the gateway never fetches it.
			parts = append(parts, fmt.Sprintf("[resource link %s %s]", c.Name, c.URI))
		case *mcp.EmbeddedResource:
			parts = append(parts, embedded(c.Resource))
			if c.Resource != nil && c.Resource.Text != "" {
				texts++
			}
			if r := c.Resource; r != nil && r.Text == "" && len(r.Blob) > 0 {
				media = append(media, tools.Media{Kind: blobKind(r.MIMEType), Mime: r.MIMEType, Name: fileName(r.URI), Data: r.Blob})
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
	out := tools.Result{IsError: res.IsError, Media: media}
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

// blobKind is the kind of an embedded blob of type mime: a picture or
// audio clip by its type, else a file.
func blobKind(mime string) string {
	switch {
	case strings.HasPrefix(mime, "image/"):
		return tools.MediaImage
	case strings.HasPrefix(mime, "audio/"):
		return tools.MediaAudio
	}
	return tools.MediaFile
}

// fileName is the last element of a resource's URI, as a file name: ""
// when it has none fit to show.
func fileName(uri string) string {
	if u, err := url.Parse(uri); err == nil && u.Path != "" {
		uri = u.Path
	}
	name := path.Base(uri)
	if name == "." || name == "/" || len(name) > 255 || !utf8.ValidString(name) {
		return ""
	}
	return name
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
