package schedules

import "strings"

// QuietReply is what the model answers at a fire of a quiet schedule
// when it has nothing to say; the prompt of such a fire tells it so. The
// reply is stored like any other, and not sent.
const QuietReply = "NOTHING_TO_REPORT"

// IsQuiet reports whether a reply is QuietReply: alone, whatever its
// case, spaces, quotes or final full stop around it.
func IsQuiet(reply string) bool {
	r := strings.Trim(strings.TrimSpace(reply), "\"'`*._ \n")
	return strings.EqualFold(r, QuietReply)
}
