package telegram

import "github.com/chatgate/chatgate/bots/telegram/tgformat"

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
