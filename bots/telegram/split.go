package telegram

import (
	"strings"

	"github.com/chatgate/chatgate/bots/telegram/tgformat"
)

// MaxMessageUnits is Telegram's limit on a message's text, counted in UTF-16
// code units (an emoji outside the Basic Multilingual Plane counts two).
const MaxMessageUnits = 4096

// Split cuts text into messages of at most limit UTF-16 code units. It cuts
// after the last line break that fits, else after the last space, else
// between two characters (never inside one, never inside a surrogate pair).
// The line break or space at a cut is dropped; nothing else is lost.
func Split(text string, limit int) []string { return tgformat.SplitText(text, limit) }

func utf16Len(s string) int { return tgformat.Units(s) }

func utf16Units(r rune) int { return tgformat.RuneUnits(r) }

// fitList is head followed by n entries (entry(i), each starting with its
// own separator), in order, as many as fit in one message's
// MaxMessageUnits and at most max; then, when some are left out, "\n\n"
// and more(the number left out). It returns the text and how many
// entries it shows. The lists of /memory and /reminders are cut so: one
// message, never refused for its length, that says what it leaves out.
// head must fit with room to spare.
func fitList(head string, n, max int, entry func(i int) string, more func(left int) string) (string, int) {
	var sb strings.Builder
	sb.WriteString(head)
	used := tgformat.Units(head)
	// Room for the count of those not shown, kept by every entry but the
	// last (after it none are left): the count of n takes the most.
	room := tgformat.Units("\n\n" + more(n))
	shown := 0
	for i := 0; i < n && i < max; i++ {
		e := entry(i)
		need := tgformat.Units(e)
		if i < n-1 {
			need += room
		}
		if used+need > MaxMessageUnits {
			break
		}
		sb.WriteString(e)
		used += tgformat.Units(e)
		shown++
	}
	if shown < n {
		sb.WriteString("\n\n" + more(n-shown))
	}
	return sb.String(), shown
}
