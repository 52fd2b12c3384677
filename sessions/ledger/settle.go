package ledger

import (
	"fmt"
	"slices"
	"strings"

	"github.com/chatgate/chatgate/agent"
)

// What settles a turn — written once, here, for every place that needs
// it: the domain asks SettlesTurn of a reply in memory, and the SQL that
// finds a turn's final reply (FinalReplySQL, AnsweredSQL) and the appends
// that mark a turn answered in the reply's own transaction (AnswerRows,
// AnswerWhere; SQLite's statements and PostgreSQL's pipeline alike) are
// built from the same constants below.
//
// A turn is settled by its final reply: an assistant message that answers
// it, carries no tool calls (a tool round is not an answer), and is not
// the partial reply of a turn that will run again — one a shutdown cut
// (run again after the restart) or one a newer message interrupted (one
// new turn answers both). A turn the user stopped is settled by its
// partial reply: it is not run again.

// unsettling are the reasons (Message.Error) for which an interrupted
// final reply does not settle its turn.
var unsettling = []string{InterruptedByShutdown, InterruptedByMessage}

// IsFinalReply reports whether m is the message a user sees as the answer
// to their message: an assistant message without tool calls.
func IsFinalReply(m *Message) bool {
	return m.Role == agent.RoleAssistant && m.ToolCalls == "" && m.ReplyTo > 0
}

// SettlesTurn reports whether m, stored, settles the turn of the message
// it answers (FinalReplySQL says the same of a stored row).
func SettlesTurn(m *Message) bool {
	return IsFinalReply(m) && !(m.Status == MsgInterrupted && slices.Contains(unsettling, m.Error))
}

// Settles reports whether a final reply of that status and error settles
// its turn (SettlesTurn, for what a transcript keeps of a message).
func Settles(status, reason string) bool {
	return !(status == MsgInterrupted && slices.Contains(unsettling, reason))
}

// finalReplyWhere is SettlesTurn on a row r of messages.
var finalReplyWhere = `%[1]s.role = '` + agent.RoleAssistant + `' AND (%[1]s.tool_calls IS NULL OR %[1]s.tool_calls = '')
	AND NOT (%[1]s.status = '` + MsgInterrupted + `' AND %[1]s.error IN (` + SQLList(unsettling) + `))`

// FinalReplySQL is the condition, on the messages row named row, that it
// settles the turn it answers.
func FinalReplySQL(row string) string { return fmt.Sprintf(finalReplyWhere, row) }

// finalReplyOf is the condition, on a user message row u, that its final
// reply is stored: a final reply after it that answers it (the reply's
// reply_to is the lead of the burst the message was merged into, or the
// message itself).
var finalReplyOf = `EXISTS (SELECT 1 FROM messages AS r WHERE r.conversation_id = %[1]s.conversation_id AND r.seq > %[1]s.seq
	AND r.reply_to = (CASE WHEN %[1]s.turn_lead > 0 THEN %[1]s.turn_lead ELSE %[1]s.seq END)
	AND ` + FinalReplySQL("r") + `)`

// AnsweredSQL is the condition, on the user message row named row, that
// its turn's final reply is stored.
func AnsweredSQL(row string) string { return fmt.Sprintf(finalReplyOf, row) }

// NotRunPrefix starts the error of the reply stored for a turn too old to
// run.
const NotRunPrefix = "not run:"

// OverBudgetPrefix starts the error of the reply stored for a turn whose
// user was over budget; the budget follows it.
const OverBudgetPrefix = "over budget: "

// AnswerRow is a user message a final reply may close: its conversation
// and seq, and the reply's lead (reply_to) and seq.
type AnswerRow struct {
	Conv             string
	Seq, Lead, Reply int64
}

// AnswerRows appends the user messages the final replies among a's
// messages may close: Append.Answers, or the lead alone. The append's
// transaction marks them answered on AnswerWhere.
func AnswerRows(out []AnswerRow, a *Append) []AnswerRow {
	for i := range a.Messages {
		m := &a.Messages[i]
		switch {
		case !SettlesTurn(m):
		case len(a.Answers) == 0:
			out = append(out, AnswerRow{a.Conv.ID, m.ReplyTo, m.ReplyTo, m.Seq})
		default:
			for _, seq := range a.Answers {
				out = append(out, AnswerRow{a.Conv.ID, seq, m.ReplyTo, m.Seq})
			}
		}
	}
	return out
}

// answerWhere is the mark's condition on the message, given its
// conversation, seq, the reply's lead and the reply's seq, and the
// condition of an open turn: the message is open, its channel does not
// confirm delivery (a tracked lead stays open until it is marked
// delivered), and the reply answers it (finalReplyOf from the reply's
// side: the reply's lead is the message, or the lead of the burst the
// message was merged into, and the reply comes after it), so a wrong seq
// given marks nothing.
const answerWhere = `conversation_id = %[1]s AND seq = %[2]s AND %[5]s AND NOT turn_track
	AND (turn_lead = %[3]s OR (turn_lead = 0 AND seq = %[3]s)) AND seq < %[4]s`

// AnswerWhere is the condition of marking a user message answered by a
// final reply, given the SQL of its conversation, seq, the reply's lead,
// the reply's seq, and the condition that its turn is open.
func AnswerWhere(conv, seq, lead, reply, open string) string {
	return fmt.Sprintf(answerWhere, conv, seq, lead, reply, open)
}

// SQLList is a list of SQL string literals, for an IN (…).
func SQLList(vals []string) string {
	quoted := make([]string, len(vals))
	for i, v := range vals {
		quoted[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
	}
	return strings.Join(quoted, ", ")
}
