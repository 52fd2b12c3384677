// Package demo is the MCP server of chatgate-mcp-demo: a few small tools
// to try the gateway's tools with, and for its tests to run against a
// real process. notes_add and counter have side effects (the kind a
// gateway must not run twice); notes_list and clock only read; slow
// takes its time and stops when the call is cancelled; chart answers a
// picture and a PDF file (media from tools).
//
// counter's count and slow's starts can be kept in a file (CountFile),
// so whoever started the server can read how many times they ran, even
// after the process was killed.
package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Options configure the server.
type Options struct {
	// Notes is the file notes are kept in, a line each; "" keeps them
	// in memory.
	Notes string
	// CountFile is the file counter's count and slow's starts are kept
	// in (JSON, see Counts); "" keeps them in memory.
	CountFile string
	// SlowOnce makes slow take its time on its first start only (as
	// counted, in the count file when there is one): a later start
	// answers at once. A test stops a gateway during the first call and
	// sees a call started again finish.
	SlowOnce bool
	// Now is the clock's time; nil is time.Now.
	Now func() time.Time
}

// Counts is what the count file holds.
type Counts struct {
	Counter     int `json:"counter"`      // counter's runs
	SlowStarted int `json:"slow_started"` // slow's starts
}

// ReadCounts reads a count file; a file not written yet is zero counts.
func ReadCounts(path string) (Counts, error) {
	var c Counts
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, err
	}
	return c, json.Unmarshal(b, &c)
}

// MaxSlow is the longest slow sleeps.
const MaxSlow = 5 * time.Minute

type state struct {
	opts Options

	mu     sync.Mutex
	notes  []string // when there is no notes file
	counts Counts   // when there is no count file
}

// New returns the server with its tools.
func New(opts Options) *mcp.Server {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	st := &state{opts: opts}
	s := mcp.NewServer(&mcp.Implementation{Name: "chatgate-mcp-demo", Version: "1"}, nil)
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true}

	type noteIn struct {
		Text string `json:"text" jsonschema:"the note"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "notes_add", Description: "Adds a note and answers how many there are."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in noteIn) (*mcp.CallToolResult, any, error) {
			n, err := st.addNote(in.Text)
			if err != nil {
				return nil, nil, err
			}
			return text(fmt.Sprintf("%d notes", n)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "notes_list", Description: "Lists the notes.", Annotations: readOnly},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			notes, err := st.listNotes()
			if err != nil {
				return nil, nil, err
			}
			if len(notes) == 0 {
				return text("no notes yet"), nil, nil
			}
			var b strings.Builder
			for i, n := range notes {
				fmt.Fprintf(&b, "%d. %s\n", i+1, n)
			}
			return text(strings.TrimSuffix(b.String(), "\n")), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "counter", Description: "Adds one to a counter and answers it."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			c, err := st.count(func(c *Counts) { c.Counter++ })
			if err != nil {
				return nil, nil, err
			}
			return text(fmt.Sprint(c.Counter)), nil, nil
		})
	type slowIn struct {
		Seconds float64 `json:"seconds" jsonschema:"how long to take, at most 300"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "slow", Description: "Takes the given number of seconds, then answers; stops early when cancelled.", Annotations: readOnly},
		func(ctx context.Context, _ *mcp.CallToolRequest, in slowIn) (*mcp.CallToolResult, any, error) {
			c, err := st.count(func(c *Counts) { c.SlowStarted++ })
			if err != nil {
				return nil, nil, err
			}
			d := min(time.Duration(in.Seconds*float64(time.Second)), MaxSlow)
			if opts.SlowOnce && c.SlowStarted > 1 {
				d = 0
			}
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			case <-t.C:
				return text(fmt.Sprintf("done after %s", d)), nil, nil
			}
		})
	mcp.AddTool(s, &mcp.Tool{Name: "chart", Description: "Draws a bar chart of the numbers given (a PNG) and answers it with a one-page PDF report of them.",
		Annotations: readOnly},
		func(ctx context.Context, _ *mcp.CallToolRequest, in chartIn) (*mcp.CallToolResult, any, error) {
			png, err := chartPNG(in.Values)
			if err != nil {
				return nil, nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: fmt.Sprintf("a chart of %d values, and its report", len(in.Values))},
				&mcp.ImageContent{MIMEType: "image/png", Data: png},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///chatgate-demo/report.pdf", MIMEType: "application/pdf",
					Blob: reportPDF(in.Values)}},
			}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "clock", Description: "Answers the current date and time.", Annotations: readOnly},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			return text(opts.Now().Format(time.RFC3339)), nil, nil
		})
	return s
}

// chartIn is chart's input.
type chartIn struct {
	Values []float64 `json:"values" jsonschema:"the numbers to chart (at most 50)"`
}

// chartPNG draws values as bars, 8 pixels wide each, on a 100-pixel-high
// PNG.
func chartPNG(values []float64) ([]byte, error) {
	if len(values) == 0 || len(values) > 50 {
		return nil, errors.New("give 1 to 50 values")
	}
	top := 0.0
	for _, v := range values {
		top = max(top, v)
	}
	img := image.NewRGBA(image.Rect(0, 0, 8*len(values), 100))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	for i, v := range values {
		h := 0
		if top > 0 && v > 0 {
			h = int(v / top * 100)
		}
		draw.Draw(img, image.Rect(8*i+1, 100-h, 8*i+7, 100), &image.Uniform{C: color.RGBA{R: 40, G: 100, B: 200, A: 255}}, image.Point{}, draw.Src)
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// reportPDF is a one-page PDF listing values, written by hand: a valid
// file with one text object.
func reportPDF(values []float64) []byte {
	var text strings.Builder
	text.WriteString("BT /F1 12 Tf 72 720 Td (Report) Tj")
	for _, v := range values {
		fmt.Fprintf(&text, " 0 -16 Td (%g) Tj", v)
	}
	text.WriteString(" ET")
	objs := []string{
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
		"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
		fmt.Sprintf("<< /Length %d >>\nstream\n%s\nendstream", text.Len(), text.String()),
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
	}
	var b bytes.Buffer
	b.WriteString("%PDF-1.4\n")
	offsets := make([]int, len(objs))
	for i, o := range objs {
		offsets[i] = b.Len()
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", i+1, o)
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(objs)+1)
	for _, off := range offsets {
		fmt.Fprintf(&b, "%010d 00000 n \n", off)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(objs)+1, xref)
	return b.Bytes()
}

// Handler serves the server over streamable HTTP.
func Handler(s *mcp.Server) http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
}

func (st *state) addNote(note string) (int, error) {
	note = strings.Join(strings.Fields(note), " ") // a line each
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.opts.Notes == "" {
		st.notes = append(st.notes, note)
		return len(st.notes), nil
	}
	f, err := os.OpenFile(st.opts.Notes, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	if _, err := fmt.Fprintln(f, note); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	notes, err := st.readNotes()
	return len(notes), err
}

func (st *state) listNotes() ([]string, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.opts.Notes == "" {
		return append([]string(nil), st.notes...), nil
	}
	return st.readNotes()
}

func (st *state) readNotes() ([]string, error) {
	b, err := os.ReadFile(st.opts.Notes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n"), nil
}

// count changes the counts and keeps them: in the count file, written
// whole and renamed into place so a reader never sees half of it.
func (st *state) count(change func(*Counts)) (Counts, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.opts.CountFile == "" {
		change(&st.counts)
		return st.counts, nil
	}
	c, err := ReadCounts(st.opts.CountFile)
	if err != nil {
		return c, err
	}
	change(&c)
	b, _ := json.Marshal(c)
	tmp, err := os.CreateTemp(filepath.Dir(st.opts.CountFile), ".counts-*")
	if err != nil {
		return c, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return c, err
	}
	if err := tmp.Close(); err != nil {
		return c, err
	}
	return c, os.Rename(tmp.Name(), st.opts.CountFile)
}

func text(t string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: t}}}
}
