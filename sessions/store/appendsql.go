package store

import (
	"gorm.io/gorm"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// stmtRows is how many conversations or messages one statement carries at
// most: a batch of a few hundred turns costs a handful of statements, and
// the prepared texts (one per row count, in the stmtCache) stay few.
const stmtRows = 32

// appendAll runs appends to distinct conversations as set-based statements
// (on SQLite; PostgreSQL's appends go through its pipeline, pgPipe):
// an UPDATE of all their conversations, each guarded by the seq and the
// claim epoch its writer saw (and, for user messages, by being active),
// then multi-row INSERTs of all their messages. A single append gets the plain statements. It fails
// with ErrStale when any guard failed; the committer then runs the appends
// one by one to find which. The statements run through st, SQLite's
// prepared statements (nil: unprepared).
func appendAll(tx *gorm.DB, st *stmtCache, ops []*writeOp) error {
	for start := 0; start < len(ops); start += stmtRows {
		chunk := ops[start:min(start+stmtRows, len(ops))]
		query, args := updateConversations(chunk)
		n, err := st.exec(tx, query, args...)
		if err != nil {
			return err
		}
		if n != int64(len(chunk)) {
			return ledger.ErrStale
		}
	}
	var rows []*ledger.Message
	for _, op := range ops {
		for i := range op.app.Messages {
			rows = append(rows, &op.app.Messages[i])
		}
	}
	for start := 0; start < len(rows); start += stmtRows {
		query, args := insertMessages(rows[start:min(start+stmtRows, len(rows))])
		if _, err := st.exec(tx, query, args...); err != nil {
			return err
		}
	}
	// The ledger rides the same transaction: a user message carries its
	// turn, a reply lands only while no claim moved the conversation's
	// epoch, a final reply closes the turn it answers, and a turn handed
	// back (interrupted) is released with it.
	var answers []ledger.AnswerRow
	for _, op := range ops {
		answers = ledger.AnswerRows(answers, op.app)
	}
	for start := 0; start < len(answers); start += stmtRows {
		query, args := answerTurnsSQL(answers[start:min(start+stmtRows, len(answers))])
		if _, err := st.exec(tx, query, args...); err != nil {
			return err
		}
	}
	for _, op := range ops {
		if op.app.Settle == nil {
			continue
		}
		query, args := settleTurns(op.app)
		n, err := st.exec(tx, query, args...)
		if err != nil {
			return err
		}
		if n == 0 {
			return ledger.ErrLostClaim
		}
	}
	return tallyUsage(tx, st, ops)
}

// updateConversations builds the guarded UPDATE of the appends'
// conversations: their seq, activity, tokens, cost and model.
func updateConversations(ops []*writeOp) (string, []any) {
	if len(ops) == 1 {
		a := ops[0].app
		query := updateConversationSQL
		if a.RequireActive {
			query = updateActiveConversationSQL
		}
		return query, []any{int64(len(a.Messages)), &a.KeepActivity, &a.At, &a.Tokens, &a.Cost, &a.Model, &a.Model, &a.Conv.ID, &a.ExpectSeq, &a.Conv.Epoch}
	}
	args := make([]any, 0, 10*len(ops))
	for _, op := range ops {
		a := op.app
		active := 0
		if a.RequireActive {
			active = 1
		}
		keep := 0
		if a.KeepActivity {
			keep = 1
		}
		args = append(args, &a.Conv.ID, &a.ExpectSeq, int64(len(a.Messages)), &a.At, keep, &a.Tokens, &a.Cost, &a.Model, active, &a.Conv.Epoch)
	}
	return updateConversationsSQL.text(len(ops)), args
}

var (
	updateConversationSQL = `UPDATE conversations SET last_seq = last_seq + ?,
			last_activity_at = CASE WHEN ? THEN last_activity_at ELSE ? END, total_tokens = total_tokens + ?,
			cost = cost + ?, model = CASE WHEN ? = '' THEN model ELSE ? END WHERE id = ? AND last_seq = ? AND epoch = ?`
	updateActiveConversationSQL = updateConversationSQL + " AND status = 'active'"
	// status as a literal, like everywhere the partial indexes matter.
	updateConversationsSQL = newRowTexts("WITH v(v_id, v_expect, v_n, v_at, v_keep, v_tokens, v_cost, v_model, v_active, v_epoch) AS (VALUES ",
		"(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
		`) UPDATE conversations SET last_seq = conversations.last_seq + v.v_n,
		last_activity_at = CASE WHEN v.v_keep = 1 THEN conversations.last_activity_at ELSE v.v_at END,
		total_tokens = conversations.total_tokens + v.v_tokens, cost = conversations.cost + v.v_cost,
		model = CASE WHEN v.v_model = '' THEN conversations.model ELSE v.v_model END
		FROM v WHERE conversations.id = v.v_id AND conversations.last_seq = v.v_expect AND conversations.epoch = v.v_epoch
		AND (v.v_active = 0 OR conversations.status = 'active')`)
	insertMessagesSQL = newRowTexts(`INSERT INTO messages (conversation_id, seq, role, content, tool_calls, tool_call_id, client_msg_id,
		reply_to, status, error, prompt_tokens, completion_tokens, cost, created_at, attachments,
		turn_state, turn_owner, turn_attempt, turn_due, turn_track, turn_lead, quote) VALUES `,
		"(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", "")
)

// insertMessages builds one multi-row INSERT of messages. Every value is
// a parameter, so that the text depends only on the number of rows.
func insertMessages(rows []*ledger.Message) (string, []any) {
	args := make([]any, 0, 22*len(rows))
	for _, m := range rows {
		// By address: the rows outlive the statement.
		args = append(args, &m.ConversationID, &m.Seq, &m.Role, &m.Content, &m.ToolCalls, &m.ToolCallID, m.ClientMsgID,
			&m.ReplyTo, &m.Status, &m.Error, &m.PromptTokens, &m.CompletionTkns, &m.Cost, &m.CreatedAt, &m.Attachments,
			&m.TurnState, &m.TurnOwner, &m.TurnAttempt, m.TurnDue, &m.TurnTrack, &m.TurnLead, &m.Quote)
	}
	return insertMessagesSQL.text(len(rows)), args
}
