// Package mcptest is an MCP server for tests, built with the official
// SDK: tools with a side effect (counter), without (echo), that block
// (slow), fail (fail), answer a lot (big) or a picture and a file (media), and tools added or removed
// while a client is connected (the server then says its list changed).
// It records every call — its tool, arguments, _meta, whether it
// finished or saw its cancellation — so tests can wait on what the
// server saw rather than on time.
package mcptest

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Call is one call as the server saw it.
type Call struct {
	Tool      string
	Arguments json.RawMessage
	Meta      map[string]any // the request's _meta
	Done      bool           // the tool returned
	Cancelled bool           // the tool's context ended before it returned (slow)
}

// Server is the test server. MCP is what clients connect to.
type Server struct {
	MCP *mcp.Server

	mu      sync.Mutex
	calls   []Call
	counts  map[string]int
	changed chan struct{} // closed and replaced on every change of calls
}

// Tool names of the server.
const (
	Counter = "counter" // {"key": string}: increments the key's count, answers it
	Echo    = "echo"    // {"text": string}: answers the text
	Slow    = "slow"    // {"seconds": number}: answers after that long (0: never), or when cancelled
	Fail    = "fail"    // {"message": string}: answers an error result
	Big     = "big"     // {"bytes": int, "char": string}: answers bytes bytes of char (default "x")
	Media   = "media"   // {"png_bytes": int, "broken": bool, "audio": bool}: answers a text, the picture PNG and the file PDF (report.pdf); png_bytes > 0 pads the picture to that size, broken makes its bytes no picture, audio adds the clip WAV last
)

// What the media tool answers: a 2×2 PNG picture and a small PDF file,
// embedded as a blob named report.pdf; asked to, a WAV clip of a tenth
// of a second of silence.
var (
	PNG = mustPNG()
	PDF = []byte("%PDF-1.4\n1 0 obj <</Type /Catalog>> endobj\ntrailer <</Root 1 0 R>>\n%%EOF\n")
	WAV = mustWAV()
)

// mustWAV is 800 samples of 8-bit mono PCM at 8 kHz in a RIFF WAVE file.
func mustWAV() []byte {
	const samples, rate = 800, 8000
	var b bytes.Buffer
	le := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	b.WriteString("RIFF")
	le(uint32(36 + samples))
	b.WriteString("WAVEfmt ")
	le(uint32(16))   // fmt chunk size
	le(uint16(1))    // PCM
	le(uint16(1))    // mono
	le(uint32(rate)) // sample rate
	le(uint32(rate)) // bytes per second
	le(uint16(1))    // block align
	le(uint16(8))    // bits per sample
	b.WriteString("data")
	le(uint32(samples))
	b.Write(bytes.Repeat([]byte{128}, samples))
	return b.Bytes()
}

// PDFURI is the URI of the media tool's embedded PDF.
const PDFURI = "file:///reports/report.pdf"

func mustPNG() []byte {
	img := image.NewRGBA(image.Rect(0, 0, 2, 2))
	img.Set(0, 0, color.RGBA{R: 255, A: 255})
	img.Set(1, 1, color.RGBA{B: 255, A: 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// New returns a server with the tools above.
func New() *Server {
	s := &Server{
		MCP:     mcp.NewServer(&mcp.Implementation{Name: "mcptest", Version: "1"}, nil),
		counts:  map[string]int{},
		changed: make(chan struct{}),
	}
	type keyIn struct {
		Key string `json:"key,omitempty" jsonschema:"what to count"`
	}
	mcp.AddTool(s.MCP, &mcp.Tool{Name: Counter, Description: "Counts a call of the key and answers the key's count."},
		func(ctx context.Context, req *mcp.CallToolRequest, in keyIn) (*mcp.CallToolResult, any, error) {
			i := s.start(req)
			s.mu.Lock()
			s.counts[in.Key]++
			n := s.counts[in.Key]
			s.mu.Unlock()
			s.finish(i, false)
			return text(strconv.Itoa(n)), nil, nil
		})
	type textIn struct {
		Text string `json:"text" jsonschema:"the text to answer"`
	}
	mcp.AddTool(s.MCP, &mcp.Tool{Name: Echo, Description: "Answers the text it is given."},
		func(ctx context.Context, req *mcp.CallToolRequest, in textIn) (*mcp.CallToolResult, any, error) {
			s.finish(s.start(req), false)
			return text(in.Text), nil, nil
		})
	type slowIn struct {
		Seconds float64 `json:"seconds,omitempty" jsonschema:"how long to take; 0: until cancelled"`
	}
	mcp.AddTool(s.MCP, &mcp.Tool{Name: Slow, Description: "Takes its time."},
		func(ctx context.Context, req *mcp.CallToolRequest, in slowIn) (*mcp.CallToolResult, any, error) {
			i := s.start(req)
			var after <-chan time.Time
			if in.Seconds > 0 {
				t := time.NewTimer(time.Duration(in.Seconds * float64(time.Second)))
				defer t.Stop()
				after = t.C
			}
			select {
			case <-ctx.Done():
				s.finish(i, true)
				return nil, nil, ctx.Err()
			case <-after:
				s.finish(i, false)
				return text("done"), nil, nil
			}
		})
	type failIn struct {
		Message string `json:"message,omitempty"`
	}
	mcp.AddTool(s.MCP, &mcp.Tool{Name: Fail, Description: "Always fails."},
		func(ctx context.Context, req *mcp.CallToolRequest, in failIn) (*mcp.CallToolResult, any, error) {
			s.finish(s.start(req), false)
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "failed: " + in.Message}}}, nil, nil
		})
	type bigIn struct {
		Bytes int    `json:"bytes"`
		Char  string `json:"char,omitempty"`
	}
	mcp.AddTool(s.MCP, &mcp.Tool{Name: Big, Description: "Answers a long text."},
		func(ctx context.Context, req *mcp.CallToolRequest, in bigIn) (*mcp.CallToolResult, any, error) {
			s.finish(s.start(req), false)
			c := in.Char
			if c == "" {
				c = "x"
			}
			return text(strings.Repeat(c, in.Bytes/len(c))), nil, nil
		})
	type mediaIn struct {
		PNGBytes int  `json:"png_bytes,omitempty" jsonschema:"pad the picture to this many bytes"`
		Broken   bool `json:"broken,omitempty" jsonschema:"answer a picture whose bytes are no PNG"`
		Audio    bool `json:"audio,omitempty" jsonschema:"answer an audio clip too"`
	}
	mcp.AddTool(s.MCP, &mcp.Tool{Name: Media, Description: "Answers a picture and a PDF file."},
		func(ctx context.Context, req *mcp.CallToolRequest, in mediaIn) (*mcp.CallToolResult, any, error) {
			s.finish(s.start(req), false)
			pic := PNG
			if in.PNGBytes > len(pic) {
				pic = append(bytes.Clone(pic), make([]byte, in.PNGBytes-len(pic))...)
			}
			if in.Broken {
				pic = []byte("this is no picture")
			}
			content := []mcp.Content{
				&mcp.TextContent{Text: "a chart and its report"},
				&mcp.ImageContent{MIMEType: "image/png", Data: pic},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: PDFURI, MIMEType: "application/pdf", Blob: PDF}},
			}
			if in.Audio {
				content = append(content, &mcp.AudioContent{MIMEType: "audio/wav", Data: WAV})
			}
			return &mcp.CallToolResult{Content: content}, nil, nil
		})
	return s
}

// InMemory returns a new server connected to the SDK's in-memory
// transport, and the transport's other end for a client. The server
// stops when the test ends.
func InMemory(t testing.TB) (*Server, mcp.Transport) {
	t.Helper()
	s := New()
	serverT, clientT := mcp.NewInMemoryTransports()
	ss, err := s.MCP.Connect(t.Context(), serverT, nil)
	if err != nil {
		t.Fatalf("mcptest: connect the server: %v", err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	return s, clientT
}

// AddTool adds a tool that answers "name: " and its arguments; a
// connected client is told the tool list changed.
func (s *Server) AddTool(name, description string) {
	s.MCP.AddTool(&mcp.Tool{
		Name:        name,
		Description: description,
		InputSchema: map[string]any{"type": "object"},
	}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		s.finish(s.start(req), false)
		return text(name + ": " + string(req.Params.Arguments)), nil
	})
}

// RemoveTool removes a tool; a connected client is told the tool list
// changed.
func (s *Server) RemoveTool(name string) { s.MCP.RemoveTools(name) }

// Calls are the calls so far, in the order they started.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Count is how many times counter ran, over all keys.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.counts {
		n += c
	}
	return n
}

// Counts are counter's counts by key.
func (s *Server) Counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.counts)
}

// Await waits until the calls so far meet cond, or ctx ends.
func (s *Server) Await(ctx context.Context, cond func([]Call) bool) error {
	for {
		s.mu.Lock()
		ok, changed := cond(s.calls), s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("mcptest: %w waiting for calls; seen %d", ctx.Err(), len(s.Calls()))
		}
	}
}

// Started waits until n calls of the tool have started.
func (s *Server) Started(ctx context.Context, tool string, n int) error {
	return s.Await(ctx, func(calls []Call) bool { return Of(calls, tool) >= n })
}

// Of counts the calls of the tool.
func Of(calls []Call, tool string) int {
	n := 0
	for _, c := range calls {
		if c.Tool == tool {
			n++
		}
	}
	return n
}

func (s *Server) start(req *mcp.CallToolRequest) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, Call{
		Tool:      req.Params.Name,
		Arguments: append(json.RawMessage(nil), req.Params.Arguments...),
		Meta:      maps.Clone(req.Params.Meta),
	})
	s.wake()
	return len(s.calls) - 1
}

func (s *Server) finish(i int, cancelled bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[i].Done, s.calls[i].Cancelled = !cancelled, cancelled
	s.wake()
}

func (s *Server) wake() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func text(t string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: t}}}
}
