package telegramtest

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// CheckHTML reports whether Telegram's HTML parse mode takes s, following
// the Bot API's documented rules ("HTML style" and the nesting rules of
// "Formatting options"), and errs on the strict side where the documented
// rules say "must":
//
//   - Tags: b, strong, i, em, u, ins, s, strike, del, tg-spoiler, span with
//     class="tg-spoiler", a with href, code, pre, blockquote (optionally
//     expandable), and code with class="language-…" directly inside pre.
//     Tag and attribute names are case-insensitive; values are quoted with
//     " or '. No other tag or attribute (tg-emoji and tg-time, which need a
//     premium bot or a time, are refused too), no self-closing tags, no
//     comments.
//   - Every tag is closed, by an end tag of the same name, in order.
//   - Outside tags, <, > and & appear only as entities; the only named
//     entities are &lt; &gt; &amp; and &quot;; numeric ones must name a
//     Unicode scalar value other than NUL.
//   - Nesting: code and pre contain no tag (but pre's one code child) and
//     are inside no formatting tag or link; a link holds no link;
//     blockquotes do not nest.
//   - The text is valid UTF-8.
//
// The error reads like the description Telegram gives after "Bad Request:
// can't parse entities: ".
func CheckHTML(s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("strings must be encoded in UTF-8")
	}
	type open struct {
		name string
		at   int
		lang bool // code with a language class
		kids int  // child tags (for pre)
		text bool // text directly inside (for pre with code)
	}
	var stack []open
	for i := 0; i < len(s); {
		switch c := s[i]; c {
		case '<':
			end := strings.IndexByte(s[i:], '>')
			if end < 0 {
				return fmt.Errorf("unclosed start tag at byte offset %d", i)
			}
			tag := s[i+1 : i+end]
			if strings.HasPrefix(tag, "/") {
				name := strings.ToLower(strings.TrimRight(tag[1:], " \t\n\r"))
				if len(stack) == 0 {
					return fmt.Errorf("unexpected end tag at byte offset %d", i)
				}
				top := stack[len(stack)-1]
				if name != top.name {
					return fmt.Errorf("can't find end tag corresponding to start tag \"%s\" at byte offset %d", top.name, top.at)
				}
				if top.name == "pre" && top.kids > 0 && top.text {
					return fmt.Errorf("pre with a code tag holds text outside it, at byte offset %d", top.at)
				}
				stack = stack[:len(stack)-1]
				i += end + 1
				continue
			}
			name, attrs, err := parseTag(tag)
			if err != nil {
				return fmt.Errorf("%v at byte offset %d", err, i)
			}
			el := open{name: name, at: i}
			if err := checkAttrs(name, attrs); err != nil {
				return fmt.Errorf("%v at byte offset %d", err, i)
			}
			inPre := len(stack) > 0 && stack[len(stack)-1].name == "pre"
			if name == "code" && attrs["class"] != "" {
				if !inPre {
					return fmt.Errorf("a language can't be given to a standalone code tag, at byte offset %d", i)
				}
				el.lang = true
			}
			for k, o := range stack {
				switch {
				case o.name == "code":
					return fmt.Errorf("tag \"%s\" inside code at byte offset %d", name, i)
				case o.name == "pre" && !(name == "code" && k == len(stack)-1 && o.kids == 0):
					return fmt.Errorf("tag \"%s\" inside pre at byte offset %d", name, i)
				case (name == "code" || name == "pre") && o.name != "blockquote" && o.name != "pre":
					return fmt.Errorf("tag \"%s\" inside \"%s\" at byte offset %d", name, o.name, i)
				case name == "a" && o.name == "a":
					return fmt.Errorf("a link inside a link at byte offset %d", i)
				case name == "blockquote" && o.name == "blockquote":
					return fmt.Errorf("blockquote inside blockquote at byte offset %d", i)
				}
			}
			if inPre {
				stack[len(stack)-1].kids++
			}
			stack = append(stack, el)
			i += end + 1
		case '>':
			return fmt.Errorf("unescaped \">\" at byte offset %d", i)
		case '&':
			n, err := entity(s[i:])
			if err != nil {
				return fmt.Errorf("%v at byte offset %d", err, i)
			}
			if len(stack) > 0 && stack[len(stack)-1].name == "pre" {
				stack[len(stack)-1].text = true
			}
			i += n
		default:
			if len(stack) > 0 && stack[len(stack)-1].name == "pre" {
				stack[len(stack)-1].text = true
			}
			i++
		}
	}
	if len(stack) > 0 {
		top := stack[len(stack)-1]
		return fmt.Errorf("can't find end tag corresponding to start tag \"%s\" at byte offset %d", top.name, top.at)
	}
	return nil
}

// allowed lists the tags and the attributes each takes.
var allowed = map[string][]string{
	"b": nil, "strong": nil, "i": nil, "em": nil, "u": nil, "ins": nil,
	"s": nil, "strike": nil, "del": nil, "tg-spoiler": nil,
	"span": {"class"}, "a": {"href"}, "code": {"class"}, "pre": nil,
	"blockquote": {"expandable"},
}

// parseTag reads a start tag's name and attributes (the text between < and >).
func parseTag(tag string) (string, map[string]string, error) {
	j := 0
	for j < len(tag) && (isAlnum(tag[j]) || tag[j] == '-') {
		j++
	}
	name := strings.ToLower(tag[:j])
	if name == "" {
		return "", nil, fmt.Errorf("unsupported start tag %q", tag)
	}
	if _, ok := allowed[name]; !ok {
		return "", nil, fmt.Errorf("unsupported start tag \"%s\"", name)
	}
	attrs := map[string]string{}
	rest := tag[j:]
	for {
		trimmed := strings.TrimLeft(rest, " \t\n\r")
		if trimmed == "" {
			return name, attrs, nil
		}
		if len(trimmed) == len(rest) {
			return "", nil, fmt.Errorf("expected whitespace before an attribute of tag \"%s\"", name)
		}
		rest = trimmed
		k := 0
		for k < len(rest) && (isAlnum(rest[k]) || rest[k] == '-') {
			k++
		}
		if k == 0 {
			return "", nil, fmt.Errorf("bad attribute in tag \"%s\"", name)
		}
		attr := strings.ToLower(rest[:k])
		rest = rest[k:]
		value := ""
		if strings.HasPrefix(rest, "=") {
			rest = rest[1:]
			if rest == "" || (rest[0] != '"' && rest[0] != '\'') {
				return "", nil, fmt.Errorf("unquoted value of attribute \"%s\"", attr)
			}
			q := rest[0]
			e := strings.IndexByte(rest[1:], q)
			if e < 0 {
				return "", nil, fmt.Errorf("unclosed value of attribute \"%s\"", attr)
			}
			raw := rest[1 : 1+e]
			if err := checkValue(raw); err != nil {
				return "", nil, fmt.Errorf("attribute \"%s\": %v", attr, err)
			}
			value = raw
			rest = rest[e+2:]
		}
		if _, dup := attrs[attr]; dup {
			return "", nil, fmt.Errorf("attribute \"%s\" given twice", attr)
		}
		attrs[attr] = value
	}
}

// checkAttrs refuses attributes a tag does not take and values Telegram
// gives no meaning.
func checkAttrs(name string, attrs map[string]string) error {
	for a := range attrs {
		ok := false
		for _, want := range allowed[name] {
			ok = ok || a == want
		}
		if !ok {
			return fmt.Errorf("attribute \"%s\" not allowed in tag \"%s\"", a, name)
		}
	}
	switch name {
	case "a":
		if _, ok := attrs["href"]; !ok {
			return fmt.Errorf("tag \"a\" without href")
		}
	case "span":
		if attrs["class"] != "tg-spoiler" {
			return fmt.Errorf("tag \"span\" must have class \"tg-spoiler\"")
		}
	case "code":
		if c, ok := attrs["class"]; ok && (!strings.HasPrefix(c, "language-") || len(c) == len("language-")) {
			return fmt.Errorf("class of tag \"code\" must be language-…, got %q", c)
		}
	}
	return nil
}

// entity returns the length of the entity at the start of s.
func entity(s string) (int, error) {
	semi := strings.IndexByte(s, ';')
	if semi < 0 || semi > 12 {
		return 0, fmt.Errorf("unescaped \"&\"")
	}
	body := s[1:semi]
	switch body {
	case "lt", "gt", "amp", "quot":
		return semi + 1, nil
	}
	if !strings.HasPrefix(body, "#") {
		return 0, fmt.Errorf("unsupported named entity \"&%s;\"", body)
	}
	num := body[1:]
	base := 10
	if strings.HasPrefix(num, "x") || strings.HasPrefix(num, "X") {
		num, base = num[1:], 16
	}
	v, err := strconv.ParseUint(num, base, 32)
	if err != nil || num == "" || v == 0 || v > utf8.MaxRune || (v >= 0xD800 && v <= 0xDFFF) {
		return 0, fmt.Errorf("bad numeric entity \"&%s;\"", body)
	}
	return semi + 1, nil
}

// checkValue checks an attribute value's entities; < is refused in it too.
func checkValue(v string) error {
	for i := 0; i < len(v); {
		switch v[i] {
		case '<':
			return fmt.Errorf("unescaped \"<\"")
		case '&':
			n, err := entity(v[i:])
			if err != nil {
				return err
			}
			i += n
		default:
			i++
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
