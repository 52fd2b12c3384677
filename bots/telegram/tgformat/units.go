package tgformat

import (
	"strings"
	"unicode/utf8"
)

// Units is the length of s in UTF-16 code units, the unit of Telegram's
// message limit: a character outside the Basic Multilingual Plane (most
// emoji) counts two.
func Units(s string) int {
	n := 0
	for _, r := range s {
		n += RuneUnits(r)
	}
	return n
}

// RuneUnits is the number of UTF-16 code units r takes: 2 outside the
// Basic Multilingual Plane, else 1.
func RuneUnits(r rune) int {
	if r >= 0x10000 {
		return 2
	}
	return 1
}

// SplitText cuts plain text into messages of at most limit UTF-16 code
// units. It cuts after the last line break that fits, else after the last
// space, else between two characters (never inside one, never inside a
// surrogate pair); a line break or space is looked for only in the second
// half of what fits, so no message is left tiny. The line break or space at
// a cut is dropped; nothing else is lost.
func SplitText(text string, limit int) []string {
	var out []string
	for {
		cut := prefixWithin(text, limit) // bytes of the longest prefix that fits
		if cut == len(text) {
			break
		}
		if cut == 0 {
			// A limit below one character: the character goes alone.
			_, cut = utf8.DecodeRuneInString(text)
		}
		head := text[:cut]
		sep := 0
		if i := strings.LastIndexByte(head, '\n'); i > 0 && i >= cut/2 {
			cut, sep = i, 1
		} else if i := strings.LastIndexByte(head, ' '); i > 0 && i >= cut/2 {
			cut, sep = i, 1
		}
		out = append(out, text[:cut])
		text = text[cut+sep:]
	}
	if text != "" || len(out) == 0 {
		out = append(out, text)
	}
	return out
}

// prefixWithin returns the byte length of the longest prefix of s that is at
// most limit UTF-16 code units, ending on a rune boundary.
func prefixWithin(s string, limit int) int {
	units := 0
	for i, r := range s {
		u := RuneUnits(r)
		if r == utf8.RuneError {
			u = 1
		}
		if units+u > limit {
			return i
		}
		units += u
	}
	return len(s)
}
