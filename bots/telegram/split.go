package telegram

import (
	"strings"
	"unicode/utf8"
)

// MaxMessageUnits is Telegram's limit on a message's text, counted in UTF-16
// code units (an emoji outside the Basic Multilingual Plane counts two).
const MaxMessageUnits = 4096

// Split cuts text into messages of at most limit UTF-16 code units. It cuts
// after the last line break that fits, else after the last space, else
// between two characters (never inside one, never inside a surrogate pair).
// The line break or space at a cut is dropped; nothing else is lost.
func Split(text string, limit int) []string {
	var out []string
	for utf16Len(text) > limit {
		cut := prefixWithin(text, limit) // bytes of the longest prefix that fits
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

func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16Units(r)
	}
	return n
}

func utf16Units(r rune) int {
	if r >= 0x10000 {
		return 2
	}
	return 1
}

// prefixWithin returns the byte length of the longest prefix of s that is at
// most limit UTF-16 code units, ending on a rune boundary.
func prefixWithin(s string, limit int) int {
	units := 0
	for i, r := range s {
		u := utf16Units(r)
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
