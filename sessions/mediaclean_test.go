package sessions

import (
	"strings"
	"testing"
)

// A tool's type and name for an item are untrusted text: kept as a plain
// type/subtype and a bare file name, bounded, so that no tool can make the
// turn's storage refuse its result (a PostgreSQL column of 255) or put a
// line break into an upload's headers.
func TestToolMediaTypeAndNameAreCleaned(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"image/png", "image/png"},
		{"Image/PNG; charset=x", "image/png"},
		{"image/png;" + strings.Repeat("x", 300), ""},
		{"image/" + strings.Repeat("p", 300), ""},
		{"not a type", ""},
		{"", ""},
	} {
		if got := mediaType(c.in); got != c.want {
			t.Errorf("mediaType(%.40q) = %q, want %q", c.in, got, c.want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"report.pdf", "report.pdf"},
		{"../../etc/passwd", "passwd"},
		{`C:\temp\chart.png`, "chart.png"},
		{"a\r\nContent-Type: text/html\r\n.png", "html.png"},
		{"chart\r\n.png", "chart.png"},
		{"..", ""},
		{strings.Repeat("é", 300), strings.Repeat("é", 100)},
	} {
		if got := mediaName(c.in); got != c.want {
			t.Errorf("mediaName(%.40q) = %q, want %q", c.in, got, c.want)
		}
	}
}
