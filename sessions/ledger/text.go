package ledger

import (
	"strings"
	"unicode/utf8"
)

// TextReplacement stands in, in stored text, for a NUL byte and for each
// run of bytes that are not UTF-8: U+FFFD, the replacement character.
const TextReplacement = "\uFFFD"

// StorableText is s as the store keeps it, on SQLite and PostgreSQL
// alike: every NUL byte and every run of invalid UTF-8 replaced by
// TextReplacement. PostgreSQL refuses both in text for good (SQLSTATE
// 22021); SQLite would keep them, and the stores would differ. The store
// applies it to every text value it binds to a statement; the domain
// needs it only to compare text it holds with text read back. Text that
// needs no change is returned as it is, without a copy.
func StorableText(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, TextReplacement), "\x00", TextReplacement)
}
