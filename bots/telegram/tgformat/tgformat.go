// Package tgformat turns the Markdown a model writes into Telegram's HTML
// parse mode, and cuts it into messages that are each valid on their own.
//
// The Markdown is parsed as CommonMark (with GitHub's strikethrough and
// tables) by goldmark and its syntax tree is walked; no pattern matching on
// the text. The result uses only tags Telegram accepts: b, i, s, code, pre,
// pre+code with a language class, a href and blockquote, and only the
// entities &lt; &gt; &amp; and &quot;. What Telegram has no tag for is written
// as text: list bullets and numbers, headings (bold), tables (aligned in a
// pre block), thematic breaks, images (their description, linked), and raw
// HTML in the Markdown, shown as the characters that were written.
//
// Telegram's nesting rules are kept: code and pre contain no other tag and
// sit in no formatting tag or link (code inside bold text is written as
// plain code; code inside a link as the link's text), and a quote inside a
// quote adds no second blockquote.
package tgformat

import (
	"bufio"
	"bytes"
	"html"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	east "github.com/yuin/goldmark/extension/ast"
	ghtml "github.com/yuin/goldmark/renderer/html"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"
)

// Part is one message of a reply cut by Split.
type Part struct {
	// HTML is the part in Telegram's HTML parse mode: every tag it opens
	// it closes, so it is valid on its own.
	HTML string
	// Plain is the part's visible text without markup: what Telegram
	// shows for HTML, and what is sent instead when Telegram refuses it.
	Plain string
}

// md is the parser: CommonMark with GitHub's strikethrough and tables.
// Raw HTML is parsed as such so that it can be shown as text.
var md = goldmark.New(goldmark.WithExtensions(extension.Strikethrough, extension.Table))

// HTML converts markdown to Telegram HTML, whole, however long.
func HTML(markdown string) string {
	markdown = clean(markdown)
	d := render(markdown)
	if d.empty() {
		return escapeText(markdown)
	}
	return d.part(0, len(d.plain)).HTML
}

// Split converts markdown to Telegram HTML cut into parts of at most limit
// UTF-16 code units of visible text each (a limit below 2 is taken as 2, so
// that any character fits).
//
// What is counted is a part's Plain: the text Telegram shows once it has
// parsed the tags and entities, which is what its limit of 4096 applies to.
// Tags and the characters of entities (the "&amp;" of an "&") are not
// counted; every character is, spaces, line breaks, list bullets and the
// indentation of nested lists included.
//
// Parts are cut where a block ends (a paragraph, a list item, a code block)
// if that leaves the part at least half full, else after a line break, else
// after a space, else between two characters. The whitespace at a cut
// stays at the end of the part before it, so the parts' Plain texts joined
// are the whole reply's visible text (a part that would be only whitespace,
// which Telegram refuses as empty, is left out). A tag open at a cut is
// closed at the end of the part and opened again at the start of the next:
// a code block goes on in the next part as a code block of the same
// language.
//
// Markdown with no visible text once converted (only spaces, or an empty
// link) is returned as its own escaped text, so that nothing of it is lost.
func Split(markdown string, limit int) []Part {
	limit = max(limit, 2)
	markdown = clean(markdown)
	d := render(markdown)
	if d.empty() {
		var out []Part
		for _, p := range SplitText(markdown, limit) {
			out = append(out, Part{HTML: escapeText(p), Plain: p})
		}
		return out
	}
	var out []Part
	for s := 0; s < len(d.plain); {
		e := s + prefixWithin(d.plain[s:], limit)
		if e == s { // never with limit ≥ 2; a part is never empty
			_, n := utf8.DecodeRuneInString(d.plain[s:])
			e += n
		}
		if e < len(d.plain) {
			e = d.cut(s, e)
		}
		p := d.part(s, e)
		if strings.TrimSpace(p.Plain) != "" {
			out = append(out, p)
		}
		s = e
	}
	return out
}

// elem is an open tag; spans share the elements they sit in, so two
// neighbouring spans in one element are written inside one tag pair.
type elem struct {
	open, close string
	kind        kind
}

type kind int

const (
	kindFormat kind = iota // b, i, s
	kindLink
	kindQuote
	kindPre
	kindCode
)

// span is a run of visible text and the elements it sits in, outermost
// first.
type span struct {
	start int // byte offset in doc.plain
	text  string
	stack []*elem
}

// doc is a rendered reply: its visible text, cut in spans by markup, and
// the offsets in that text where a block ends (after its separator).
type doc struct {
	plain  string
	spans  []span
	blocks []int // ascending
}

func (d *doc) empty() bool { return strings.TrimSpace(d.plain) == "" }

// cut picks the end of a part that starts at s and may run up to e: the
// last block end, else line break, else space in the second half, and
// after the part's first visible character (a part of only whitespace is
// empty to Telegram).
func (d *doc) cut(s, e int) int {
	lo := s + (e-s)/2
	first := strings.IndexFunc(d.plain[s:e], func(r rune) bool { return !unicode.IsSpace(r) })
	if first < 0 {
		return e // whitespace longer than a part: left out by Split
	}
	lo = max(lo, s+first+1)
	i := sort.SearchInts(d.blocks, e+1) - 1
	if i >= 0 && d.blocks[i] >= lo {
		return d.blocks[i]
	}
	if lo < e {
		if j := strings.LastIndexByte(d.plain[lo:e], '\n'); j >= 0 {
			return lo + j + 1
		}
		if j := strings.LastIndexByte(d.plain[lo:e], ' '); j >= 0 {
			return lo + j + 1
		}
	}
	return e
}

// part writes the visible text from s to e with its markup, closing at the
// end what is open there.
func (d *doc) part(s, e int) Part {
	var b strings.Builder
	var open []*elem
	i := sort.Search(len(d.spans), func(i int) bool { return d.spans[i].start+len(d.spans[i].text) > s })
	for ; i < len(d.spans) && d.spans[i].start < e; i++ {
		sp := d.spans[i]
		t := sp.text[max(s-sp.start, 0):min(e-sp.start, len(sp.text))]
		if t == "" {
			continue
		}
		k := 0
		for k < len(open) && k < len(sp.stack) && open[k] == sp.stack[k] {
			k++
		}
		for j := len(open) - 1; j >= k; j-- {
			b.WriteString(open[j].close)
		}
		for _, el := range sp.stack[k:] {
			b.WriteString(el.open)
		}
		open = sp.stack
		b.WriteString(escapeText(t))
	}
	for j := len(open) - 1; j >= 0; j-- {
		b.WriteString(open[j].close)
	}
	return Part{HTML: b.String(), Plain: d.plain[s:e]}
}

// renderer walks the syntax tree and builds a doc.
type renderer struct {
	src    []byte
	plain  strings.Builder
	spans  []span
	blocks []int
	stack  []*elem
	indent string // written after every line break: nested list items
	inLink bool
}

// clean makes text what Telegram takes: valid UTF-8 without NUL (U+FFFD
// stands for what is not).
func clean(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

func render(markdown string) *doc {
	src := []byte(markdown)
	root := md.Parser().Parse(text.NewReader(src))
	r := &renderer{src: src}
	r.block(root)
	return &doc{plain: r.plain.String(), spans: r.spans, blocks: r.blocks}
}

// write adds visible text in the current elements. A NUL, which Telegram
// does not take, becomes U+FFFD.
func (r *renderer) write(s string) {
	if s == "" {
		return
	}
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if r.indent != "" {
		s = strings.ReplaceAll(s, "\n", "\n"+r.indent)
	}
	r.spans = append(r.spans, span{start: r.plain.Len(), text: s, stack: r.stack})
	r.plain.WriteString(s)
}

// sep writes the separator between two blocks and marks the block end.
func (r *renderer) sep(s string) {
	r.write(s)
	r.blocks = append(r.blocks, r.plain.Len())
}

// push opens an element; the returned func closes it. The stack is copied,
// never appended to in place, so that spans keep theirs.
func (r *renderer) push(el *elem) func() {
	saved := r.stack
	r.stack = append(append([]*elem(nil), saved...), el)
	return func() { r.stack = saved }
}

// onlyQuote replaces the stack by its blockquote, if any: code and pre sit
// in no formatting tag or link.
func (r *renderer) onlyQuote() func() {
	saved := r.stack
	var q []*elem
	for _, el := range saved {
		if el.kind == kindQuote {
			q = append(q, el)
		}
	}
	r.stack = q
	return func() { r.stack = saved }
}

func (r *renderer) inQuote() bool {
	for _, el := range r.stack {
		if el.kind == kindQuote {
			return true
		}
	}
	return false
}

var (
	bold   = func() *elem { return &elem{"<b>", "</b>", kindFormat} }
	italic = func() *elem { return &elem{"<i>", "</i>", kindFormat} }
	strike = func() *elem { return &elem{"<s>", "</s>", kindFormat} }
)

// children renders n's block children, sep between them.
func (r *renderer) children(n ast.Node, sep string) {
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		if c != n.FirstChild() {
			r.sep(sep)
		}
		r.block(c)
	}
}

func (r *renderer) block(n ast.Node) {
	switch n := n.(type) {
	case *ast.Document:
		r.children(n, "\n\n")
	case *ast.Paragraph, *ast.TextBlock:
		r.inlines(n)
	case *ast.Heading:
		defer r.push(bold())()
		r.inlines(n)
	case *ast.ThematicBreak:
		r.write("———")
	case *ast.FencedCodeBlock:
		r.code(n, language(n.Language(r.src)))
	case *ast.CodeBlock:
		r.code(n, "")
	case *ast.Blockquote:
		if !r.inQuote() { // Telegram's quotes do not nest
			defer r.push(&elem{"<blockquote>", "</blockquote>", kindQuote})()
		}
		r.children(n, "\n\n")
	case *ast.List:
		r.list(n)
	case *ast.HTMLBlock:
		var b strings.Builder
		for i := 0; i < n.Lines().Len(); i++ {
			seg := n.Lines().At(i)
			b.Write(seg.Value(r.src))
		}
		if n.HasClosure() {
			b.Write(n.ClosureLine.Value(r.src))
		}
		r.write(strings.TrimRight(b.String(), "\n"))
	case *east.Table:
		r.table(n)
	default:
		if n.Type() == ast.TypeInline {
			r.inline(n)
		} else if n.HasChildren() {
			r.children(n, "\n")
		} else {
			r.write(strings.TrimRight(string(n.Lines().Value(r.src)), "\n"))
		}
	}
}

// code writes a code block as pre, with code of a language when it has
// one; an empty block writes nothing.
func (r *renderer) code(n ast.Node, lang string) {
	body := strings.TrimRight(string(n.Lines().Value(r.src)), "\n")
	if body == "" {
		return
	}
	defer r.onlyQuote()()
	defer r.push(&elem{"<pre>", "</pre>", kindPre})()
	if lang != "" {
		defer r.push(&elem{`<code class="language-` + lang + `">`, "</code>", kindCode})()
	}
	r.write(body)
}

// language is the first word of a fence's info string, when it is one a
// class name can carry; else "".
func language(info []byte) string {
	lang := string(info)
	if lang == "" || len(lang) > 32 {
		return ""
	}
	for _, c := range lang {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("+-_#.", c)) {
			return ""
		}
	}
	return lang
}

// list writes items one a line: "• " or "1. " before each, the item's
// further lines and nested lists indented under its text.
func (r *renderer) list(n *ast.List) {
	num := n.Start
	between := "\n"
	if !n.IsTight {
		between = "\n\n"
	}
	for item := n.FirstChild(); item != nil; item = item.NextSibling() {
		if item != n.FirstChild() {
			r.sep(between)
		}
		marker := "•"
		if n.IsOrdered() {
			marker = strconv.Itoa(num) + "."
			num++
		}
		r.write(marker + " ")
		saved := r.indent
		r.indent += strings.Repeat(" ", utf8.RuneCountInString(marker)+1)
		r.children(item, "\n")
		r.indent = saved
	}
}

// table writes a table as preformatted text, its columns padded to line
// up and aligned as the Markdown asks.
func (r *renderer) table(n *east.Table) {
	var rows [][]string
	for row := n.FirstChild(); row != nil; row = row.NextSibling() {
		var cells []string
		for c := row.FirstChild(); c != nil; c = c.NextSibling() {
			cells = append(cells, strings.ReplaceAll(r.plainOf(c), "\n", " "))
		}
		rows = append(rows, cells)
	}
	cols := 0
	for _, row := range rows {
		cols = max(cols, len(row))
	}
	width := make([]int, cols)
	for _, row := range rows {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	line := func(row []string) {
		var out []string
		for i := range cols {
			c := ""
			if i < len(row) {
				c = row[i]
			}
			pad := width[i] - utf8.RuneCountInString(c)
			align := east.AlignNone
			if i < len(n.Alignments) {
				align = n.Alignments[i]
			}
			switch align {
			case east.AlignRight:
				c = strings.Repeat(" ", pad) + c
			case east.AlignCenter:
				c = strings.Repeat(" ", pad/2) + c + strings.Repeat(" ", pad-pad/2)
			default:
				c += strings.Repeat(" ", pad)
			}
			out = append(out, c)
		}
		b.WriteString(strings.TrimRight(strings.Join(out, " | "), " "))
	}
	for i, row := range rows {
		if i > 0 {
			b.WriteByte('\n')
		}
		line(row)
		if i == 0 {
			var dashes []string
			for _, w := range width {
				dashes = append(dashes, strings.Repeat("-", max(w, 1)))
			}
			b.WriteString("\n" + strings.Join(dashes, "-|-"))
		}
	}
	if strings.TrimSpace(b.String()) == "" {
		return
	}
	defer r.onlyQuote()()
	defer r.push(&elem{"<pre>", "</pre>", kindPre})()
	r.write(b.String())
}

// plainOf is the visible text of n's inline content.
func (r *renderer) plainOf(n ast.Node) string {
	sub := &renderer{src: r.src}
	sub.inlines(n)
	return sub.plain.String()
}

func (r *renderer) inlines(n ast.Node) {
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		r.inline(c)
	}
}

func (r *renderer) inline(n ast.Node) {
	switch n := n.(type) {
	case *ast.Text:
		if n.IsRaw() {
			r.write(string(n.Value(r.src)))
		} else {
			r.write(resolve(n.Value(r.src)))
		}
		if n.SoftLineBreak() || n.HardLineBreak() {
			r.write("\n")
		}
	case *ast.String:
		if n.IsCode() || n.IsRaw() {
			r.write(string(n.Value))
		} else {
			r.write(resolve(n.Value))
		}
	case *ast.CodeSpan:
		var b strings.Builder
		for c := n.FirstChild(); c != nil; c = c.NextSibling() {
			if t, ok := c.(*ast.Text); ok {
				v := t.Value(r.src)
				if bytes.HasSuffix(v, []byte("\n")) {
					v = append(v[:len(v)-1:len(v)-1], ' ')
				}
				b.Write(v)
			} else if s, ok := c.(*ast.String); ok {
				b.Write(s.Value)
			}
		}
		if r.inLink { // a link holds no code: the code is its text
			r.write(b.String())
			return
		}
		restore := r.onlyQuote()
		pop := r.push(&elem{"<code>", "</code>", kindCode})
		r.write(b.String())
		pop()
		restore()
	case *ast.Emphasis:
		el := italic()
		if n.Level >= 2 {
			el = bold()
		}
		defer r.push(el)()
		r.inlines(n)
	case *east.Strikethrough:
		defer r.push(strike())()
		r.inlines(n)
	case *ast.Link:
		r.link(string(n.Destination), n)
	case *ast.Image:
		r.link(string(n.Destination), n)
	case *ast.AutoLink:
		u := string(n.URL(r.src))
		if n.AutoLinkType == ast.AutoLinkEmail && !strings.HasPrefix(strings.ToLower(u), "mailto:") {
			u = "mailto:" + u
		}
		label := string(n.Label(r.src))
		if href, ok := safeURL(u); ok && !r.inLink {
			defer r.push(&elem{`<a href="` + escapeAttr(href) + `">`, "</a>", kindLink})()
		}
		r.write(label)
	case *ast.RawHTML:
		for i := 0; i < n.Segments.Len(); i++ {
			seg := n.Segments.At(i)
			r.write(string(seg.Value(r.src)))
		}
	default:
		r.inlines(n)
	}
}

// link writes n's content, in a link when dest is one Telegram may open.
func (r *renderer) link(dest string, n ast.Node) {
	if href, ok := safeURL(dest); ok && !r.inLink {
		defer r.push(&elem{`<a href="` + escapeAttr(href) + `">`, "</a>", kindLink})()
		r.inLink = true
		defer func() { r.inLink = false }()
	}
	r.inlines(n)
}

// safeURL reports whether u is a link Telegram users may follow (http,
// https, mailto, tg) and returns it percent-encoded where needed.
func safeURL(u string) (string, bool) {
	u = strings.TrimSpace(u)
	p, err := url.Parse(u)
	if err != nil {
		return "", false
	}
	switch strings.ToLower(p.Scheme) {
	case "http", "https":
		if p.Host == "" {
			return "", false
		}
	case "mailto", "tg":
	default:
		return "", false
	}
	return string(util.URLEscape([]byte(u), true)), true
}

// resolve turns Markdown text into what it shows: backslash escapes and
// character references resolved as CommonMark says (goldmark's writer does
// that while escaping for HTML; the escaping is undone here, as the doc
// keeps visible text).
func resolve(v []byte) string {
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	ghtml.DefaultWriter.Write(w, v)
	_ = w.Flush()
	return html.UnescapeString(b.String())
}

// escapeText escapes the three characters Telegram's HTML gives a meaning.
func escapeText(s string) string {
	return textEscaper.Replace(s)
}

var textEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// escapeAttr escapes an attribute value written between double quotes.
func escapeAttr(s string) string {
	return attrEscaper.Replace(s)
}

var attrEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")
