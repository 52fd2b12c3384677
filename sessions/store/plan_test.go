package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// TestQueriesUseIndexes checks SQLite's plan for the statements that run per
// turn, per lookup and per sweep: each must search an index, never scan a
// table (with a million conversations a scan per message is the outage).
func TestQueriesUseIndexes(t *testing.T) {
	db := openStore(t, DriverSQLite, t.TempDir()+"/plan.db")
	for q, index := range map[string]string{
		"SELECT * FROM conversations WHERE session_key = 'k' AND status = 'active' LIMIT 1":                                        "uq_conversations_active",
		sweepQuery(DriverSQLite, idleWhere):                                                                                        sweepIndex + " (channel=? AND activity_minute<?)",
		sweepQuery(DriverSQLite, dailyWhere):                                                                                       sweepIndex,
		"UPDATE conversations SET last_seq = last_seq + 1 WHERE id = 'x' AND last_seq = 3 AND status = 'active'":                   "sqlite_autoindex_conversations_1",
		"SELECT * FROM messages WHERE conversation_id = 'x' AND seq > 3 ORDER BY seq":                                              "sqlite_autoindex_messages_1",
		"SELECT * FROM messages WHERE conversation_id = 'x' AND client_msg_id = 'c-1'":                                             "uq_messages_client",
		"SELECT * FROM messages WHERE conversation_id = 'x' AND seq > 3 AND reply_to = 3 AND role = 'assistant' ORDER BY seq DESC": "sqlite_autoindex_messages_1 (conversation_id=? AND seq>?)",
	} {
		var rows []map[string]any
		args := make([]any, strings.Count(q, "?")) // the plan is the same for any values
		if err := db.Gorm().WithContext(context.Background()).Raw("EXPLAIN QUERY PLAN "+q, args...).Scan(&rows).Error; err != nil {
			t.Fatal(err)
		}
		plan := fmt.Sprint(rows)
		found := false
		for _, name := range strings.Split(index, "|") { // any of these
			// A covering index is searched the same way, without the table.
			found = found || strings.Contains(plan, "USING INDEX "+name) || strings.Contains(plan, "USING COVERING INDEX "+name)
		}
		if !found || strings.Contains(plan, "SCAN ") {
			t.Errorf("%s\nplan: %s\nwant a search of %s", q, plan, index)
		}
	}

	// The ledger's reads of open turns read the index of open turns: what
	// is still open, never a conversation's length. The replies a claim
	// checks are read in the primary key's range after the oldest turn it
	// found, and the final replies' marks find their messages by key.
	var answers []ledger.AnswerRow
	for i := range 3 {
		answers = append(answers, ledger.AnswerRow{Conv: fmt.Sprint("c", i), Seq: 2, Lead: 3, Reply: 4})
	}
	one, oneArgs := answerTurnsSQL(answers[:1])
	many, manyArgs := answerTurnsSQL(answers)
	now := time.Now()
	for _, c := range []struct {
		what, query, index string
		args               []any
	}{
		{"claimable turns", claimableSQL(db.openFrom()), "SEARCH u USING INDEX " + openIndex + " (conversation_id=?)",
			[]any{"c", "r1", []int64{1}, true, []string{"r1"}, now}},
		{"due turns", dueSQL("messages AS u", dueWhere), "SEARCH u USING INDEX ix_messages_turn_due (turn_due<?)", []any{now, 10}},
		{"turns of gone replicas", dueSQL(db.openFrom(), orphanWhere), "SCAN u USING INDEX " + openIndex, []any{now, []string{"r1"}, 10}},
		{"own turns", dueSQL(db.openFrom(), ownWhere), "SEARCH u USING INDEX " + openIndex + " (conversation_id=?)", []any{"c", "r1"}},
		{"final replies", finalRepliesSQL, "SEARCH r USING INDEX sqlite_autoindex_messages_1 (conversation_id=? AND seq>?)", []any{"c", 3}},
		{"answered mark", one, "SEARCH messages USING INDEX sqlite_autoindex_messages_1 (conversation_id=? AND seq=?)", oneArgs},
		{"answered marks", many, "SEARCH messages USING INDEX sqlite_autoindex_messages_1 (conversation_id=? AND seq=?)", manyArgs},
	} {
		var rows []map[string]any
		if err := db.Gorm().Raw("EXPLAIN QUERY PLAN "+c.query, c.args...).Scan(&rows).Error; err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		plan := fmt.Sprint(rows)
		if !strings.Contains(plan, c.index) || strings.Contains(plan, "SCAN messages") || strings.Contains(plan, "SCAN r ") {
			t.Errorf("%s\nplan: %s\nwant %s", c.what, plan, c.index)
		}
	}

	// A batch's merged conversation update walks its VALUES list and finds
	// each conversation by id; it must never scan the conversations.
	var ops []*writeOp
	for i := range 3 {
		ops = append(ops, &writeOp{app: &ledger.Append{Conv: &ledger.Conversation{ID: fmt.Sprint("c", i)}, Messages: make([]ledger.Message, 1)}})
	}
	q, args := updateConversations(ops)
	var rows []map[string]any
	if err := db.Gorm().Raw("EXPLAIN QUERY PLAN "+q, args...).Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if plan := fmt.Sprint(rows); !strings.Contains(plan, "SEARCH conversations USING INDEX sqlite_autoindex_conversations_1 (id=?)") ||
		strings.Contains(plan, "SCAN conversations") {
		t.Errorf("merged update\nplan: %s\nwant a search of conversations by id", plan)
	}
}
