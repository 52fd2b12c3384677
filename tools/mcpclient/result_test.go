package mcpclient

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatgate/chatgate/tools"
)

func TestRender(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  *mcp.CallToolResult
		want tools.Result
	}{
		{"texts joined", &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a"}, &mcp.TextContent{Text: "b"}}},
			tools.Result{Text: "a\nb"}},
		{"image described", &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "chart:"}, &mcp.ImageContent{MIMEType: "image/png", Data: make([]byte, 12)}}},
			tools.Result{Text: "chart:\n[image image/png, 12 bytes]", Media: []tools.Media{{Kind: tools.MediaImage, Mime: "image/png", Data: make([]byte, 12)}}}},
		{"audio of unknown type", &mcp.CallToolResult{Content: []mcp.Content{&mcp.AudioContent{Data: []byte{1}}}},
			tools.Result{Text: "[audio of unknown type, 1 bytes]", Media: []tools.Media{{Kind: tools.MediaAudio, Data: []byte{1}}}}},
		{"resource link", &mcp.CallToolResult{Content: []mcp.Content{&mcp.ResourceLink{Name: "report", URI: "file:///r.pdf"}}},
			tools.Result{Text: "[resource link report file:///r.pdf]"}},
		{"embedded text", &mcp.CallToolResult{Content: []mcp.Content{&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "mem://a", Text: "hi"}}}},
			tools.Result{Text: "[resource mem://a]\nhi"}},
		{"embedded blob", &mcp.CallToolResult{Content: []mcp.Content{&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "mem://b", MIMEType: "application/zip", Blob: []byte{1, 2}}}}},
			tools.Result{Text: "[resource mem://b application/zip, 2 bytes]", Media: []tools.Media{{Kind: tools.MediaFile, Mime: "application/zip", Name: "b", Data: []byte{1, 2}}}}},
		{"embedded pdf named by its path", &mcp.CallToolResult{Content: []mcp.Content{&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///tmp/report.pdf?x=1", MIMEType: "application/pdf", Blob: []byte("%PDF")}}}},
			tools.Result{Text: "[resource file:///tmp/report.pdf?x=1 application/pdf, 4 bytes]", Media: []tools.Media{{Kind: tools.MediaFile, Mime: "application/pdf", Name: "report.pdf", Data: []byte("%PDF")}}}},
		{"embedded picture", &mcp.CallToolResult{Content: []mcp.Content{&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "mem://p.png", MIMEType: "image/png", Blob: []byte{9}}}}},
			tools.Result{Text: "[resource mem://p.png image/png, 1 bytes]", Media: []tools.Media{{Kind: tools.MediaImage, Mime: "image/png", Name: "p.png", Data: []byte{9}}}}},
		{"structured without text", &mcp.CallToolResult{StructuredContent: map[string]any{"n": 3}},
			tools.Result{Text: `{"n":3}`}},
		{"structured with text: the text", &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "3"}}, StructuredContent: map[string]any{"n": 3}},
			tools.Result{Text: "3"}},
		{"error carried", &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no"}}},
			tools.Result{Text: "no", IsError: true}},
		{"error without content", &mcp.CallToolResult{IsError: true},
			tools.Result{Text: "the tool reported an error", IsError: true}},
		{"nothing", &mcp.CallToolResult{}, tools.Result{}},
	} {
		if got := render(tc.res, 100); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestCut(t *testing.T) {
	for _, tc := range []struct {
		text string
		max  int
		want string
		cut  bool
	}{
		{"abc", 3, "abc", false},
		{"abcd", 3, "abc\n[result cut: 3 of 4 bytes shown]", true},
		{"aéb", 2, "a\n[result cut: 1 of 4 bytes shown]", true}, // é is 2 bytes: not split
		{"€€", 5, "€\n[result cut: 3 of 6 bytes shown]", true},
		{"€", 2, "\n[result cut: 0 of 3 bytes shown]", true},
		{"abc", 0, "abc", false}, // no cap
	} {
		got, cut := cut(tc.text, tc.max)
		if got != tc.want || cut != tc.cut {
			t.Errorf("cut(%q, %d) = %q, %t; want %q, %t", tc.text, tc.max, got, cut, tc.want, tc.cut)
		}
	}
}

func TestBackoffDoublesToTheMaxAndStartsOverAfterAStableSession(t *testing.T) {
	b := backoff{min: 500 * time.Millisecond, max: 30 * time.Second, stable: time.Minute}
	var wait time.Duration
	var got []time.Duration
	for range 9 {
		wait = b.next(wait, time.Second)
		got = append(got, wait)
	}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second, 30 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("waits %v, want %v", got, want)
		}
	}
	if w := b.next(30*time.Second, time.Minute); w != b.min {
		t.Errorf("after a session of a minute: %s, want %s", w, b.min)
	}
}

func TestValidate(t *testing.T) {
	ok := ServerConfig{Name: "files", Command: "mcp-files"}
	for _, tc := range []struct {
		name string
		cfgs []ServerConfig
		want []string // parts of the error; none: valid
	}{
		{"command", []ServerConfig{ok}, nil},
		{"url with headers", []ServerConfig{{Name: "web-1", URL: "https://x/mcp", Headers: map[string]string{"Authorization": "Bearer k"}}}, nil},
		{"per tool", []ServerConfig{{Name: "a", Command: "x", Approve: tools.ApproveAuto, PerTool: map[string]ToolConfig{"rm": {Approve: tools.ApproveDeny}}}}, nil},
		{"no name, no way", []ServerConfig{{}}, []string{"#1: name is missing", "#1: set exactly one of command and url"}},
		{"both ways", []ServerConfig{{Name: "a", Command: "x", URL: "http://x"}}, []string{"exactly one"}},
		{"separator", []ServerConfig{{Name: "a__b", Command: "x"}}, []string{`name "a__b"`}},
		{"trailing underscore", []ServerConfig{{Name: "a_", Command: "x"}}, []string{`name "a_"`}},
		{"dot", []ServerConfig{{Name: "a.b", Command: "x"}}, []string{`name "a.b"`}},
		{"twice", []ServerConfig{ok, ok}, []string{"files: the name is used twice"}},
		{"headers without url", []ServerConfig{{Name: "a", Command: "x", Headers: map[string]string{"A": "b"}}}, []string{"headers need a url"}},
		{"env without command", []ServerConfig{{Name: "a", URL: "http://x", Env: map[string]string{"A": "b"}}}, []string{"args and env need a command"}},
		{"every problem", []ServerConfig{{Name: "a", Command: "x", Timeout: -1, MaxResultBytes: -1, Approve: "maybe", PerTool: map[string]ToolConfig{"t": {Approve: "often"}}}},
			[]string{"timeout -1ns is negative", "max result bytes -1 is negative", `approve "maybe"`, `tool t: approve "often"`}},
	} {
		err := Validate(tc.cfgs)
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: valid, want %q", tc.name, tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.name, err, w)
			}
		}
	}
}

func TestParseArguments(t *testing.T) {
	for args, want := range map[string]error{
		``:             nil,
		`  `:           nil,
		`{}`:           nil,
		`{"n": 1e400}`: nil, // kept as written, not parsed as a float
		`{`:            errors.New("are not valid JSON"),
		`[]`:           errors.New("are not a JSON object"),
		`null`:         errors.New("are not a JSON object"),
	} {
		_, err := parseArguments(args)
		if (err == nil) != (want == nil) || (err != nil && err.Error() != want.Error()) {
			t.Errorf("parseArguments(%q): %v, want %v", args, err, want)
		}
	}
}
