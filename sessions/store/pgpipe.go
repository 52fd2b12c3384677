package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// On PostgreSQL a group commit's appends travel as one pipeline: every
// statement of the batch (each group's guarded UPDATE of its conversations,
// its INSERT of their messages, the settles) is sent at once and closed by
// a single Sync, which makes them one implicit transaction — one round
// trip and one commit for the whole batch, where BEGIN, each statement and
// COMMIT were a round trip each.
//
// The statements have one text whatever the batch's size: the rows travel
// as arrays (pgArrayRows), so each connection prepares each statement once and
// pgx's statement cache serves it from then on, and the server plans no
// text it has not seen. A pipeline cannot look at one statement's result
// before the next runs, so the guards check themselves: a statement that
// finds fewer rows than it must calls chatgate_expect, which raises an
// error and rolls the whole transaction back, exactly as the committer's
// check of RowsAffected did between statements.

// The SQLSTATE codes chatgate_expect raises.
const (
	pgCodeStale     = "CGSTL" // a conversation moved: ErrStale
	pgCodeLostClaim = "CGCLM" // a turn's claim was taken over: ErrLostClaim
)

// pgExpectFunc is created by the migration, in the schema the store uses.
const pgExpectFunc = `CREATE OR REPLACE FUNCTION chatgate_expect(got bigint, want bigint, code text) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
	IF got <> want THEN
		RAISE EXCEPTION 'chatgate: % of % rows matched their guard', got, want USING ERRCODE = code;
	END IF;
	RETURN got;
END
$$`

var pgUpdateConversations = `WITH v AS ` + pgArrayRows("id $1::varchar[]", "expect $2::bigint[]", "n $3::bigint[]",
	"at $4::timestamptz[]", "tokens $5::bigint[]", "cost $6::numeric[]", "model $7::varchar[]", "active $8::boolean[]",
	"epoch $9::bigint[]", "keep $10::boolean[]") + `, u AS (
	UPDATE conversations AS c SET last_seq = c.last_seq + v.n,
		last_activity_at = CASE WHEN v.keep THEN c.last_activity_at ELSE v.at END,
		total_tokens = c.total_tokens + v.tokens, cost = c.cost + v.cost,
		model = CASE WHEN v.model = '' THEN c.model ELSE v.model END
	FROM v WHERE c.id = v.id AND c.last_seq = v.expect AND c.epoch = v.epoch
		AND (NOT v.active OR c.status = 'active')
	RETURNING 1
)
SELECT chatgate_expect((SELECT count(*) FROM u), cardinality($1::varchar[]), '` + pgCodeStale + `')`

var pgInsertMessages = `INSERT INTO messages (conversation_id, seq, role, content, tool_calls, tool_call_id,
	client_msg_id, reply_to, status, error, prompt_tokens, completion_tokens, cost, created_at, attachments,
	turn_state, turn_owner, turn_attempt, turn_due, turn_track, turn_lead, quote)
SELECT * FROM ` + pgArrayRows("conversation_id $1::varchar[]", "seq $2::bigint[]", "role $3::varchar[]", "content $4::text[]",
	"tool_calls $5::text[]", "tool_call_id $6::varchar[]", "client_msg_id $7::varchar[]", "reply_to $8::bigint[]",
	"status $9::varchar[]", "error $10::text[]", "prompt_tokens $11::bigint[]", "completion_tokens $12::bigint[]",
	"cost $13::numeric[]", "created_at $14::timestamptz[]", "attachments $15::text[]", "turn_state $16::varchar[]",
	"turn_owner $17::varchar[]", "turn_attempt $18::bigint[]", "turn_due $19::timestamptz[]", "turn_track $20::boolean[]",
	"turn_lead $21::bigint[]", "quote $22::text[]") + ` AS v`

// pgAnswerTurns marks answered the user messages the group's final
// replies answer, each found by its primary key, on answerTurnsSQL's
// condition.
var pgAnswerTurns = `UPDATE messages SET turn_state = 'answered'
FROM ` + pgArrayRows("v_conv $1::varchar[]", "v_seq $2::bigint[]", "v_lead $3::bigint[]", "v_reply $4::bigint[]") + ` AS v
WHERE ` + ledger.AnswerWhere("v.v_conv", "v.v_seq", "v.v_lead", "v.v_reply", openSQL(""))

const pgSettleTurn = `WITH u AS (
	UPDATE messages SET turn_state = 'interrupted', turn_owner = '', turn_due = $1
	WHERE conversation_id = $2 AND (seq = $3 OR turn_lead = $3) AND role = 'user'
		AND turn_owner = $4 AND turn_attempt = $5
	RETURNING 1
)
SELECT chatgate_expect(LEAST((SELECT count(*) FROM u), 1), 1, '` + pgCodeLostClaim + `')`

// pgArrayRows is a subquery of the rows that equally long array
// parameters carry, one row per index: each column is "name $n::type[]",
// and row i holds element i of every array.
//
// The first array is unnested WITH ORDINALITY and the others are read by
// subscript. A multi-array unnest reads the same rows, but the server
// materialises each of its arrays in a tuplestore of its own, which
// starts at 16 KiB: the 21 columns of the message INSERT took some
// 340 KiB a statement, and the backend grew its heap and gave it back to
// the kernel (brk, then page faults) on every statement. One unnest keeps
// what a single-array unnest costs, and the planner's estimate of its rows
// (10, where a set-returning function in a select list counts as 1,000
// and turns the join with conversations into a scan of the whole table).
func pgArrayRows(cols ...string) string {
	var sel strings.Builder
	var firstName, firstParam string
	for i, c := range cols {
		name, param, ok := strings.Cut(c, " ")
		switch {
		case !ok:
			panic("pgArrayRows: column without a parameter: " + c)
		case i == 0:
			firstName, firstParam = name, param
			sel.WriteString("s." + name)
		default:
			fmt.Fprintf(&sel, ", (%s)[s.chatgate_i] AS %s", param, name)
		}
	}
	return "(SELECT " + sel.String() + " FROM unnest(" + firstParam + ") WITH ORDINALITY AS s(" + firstName + ", chatgate_i))"
}

// pgPipe sends appends through a pgx connection of the store's pool.
type pgPipe struct {
	db        *sql.DB
	translate func(error) error
	// sent is when the last pipeline was sent (its statements built and
	// bound), for CommitBatch; only the appends' one worker writes it.
	sent time.Time
}

// run commits ops in one pipelined implicit transaction. An error the
// server answered for a statement (a guard, a duplicate client id) rolled
// all of them back; any other error leaves it unknown whether they landed,
// as a failed COMMIT does.
func (p *pgPipe) run(ops []*writeOp) error {
	b := &pgx.Batch{}
	queueAppends(b, ops)
	// The tallies come last, all in one statement in key order: every
	// transaction takes their locks after its conversations', in the same
	// order.
	if rows := ledger.UsageRows(usageOf(ops)); len(rows) > 0 {
		b.Queue(pgTallyUsage, pgUsageArgs(rows)...)
	}
	queueNotesVersions(b, ops)
	// The pipeline binds its arguments itself, past database/sql: made
	// storable here, every statement's (storableValue).
	for _, q := range b.QueuedQueries {
		storableArgs(q.Arguments)
	}
	ctx := context.Background()
	conn, err := p.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		p.sent = time.Now()
		return dc.(*storablePGConn).Conn.Conn().SendBatch(ctx, b).Close()
	})
}

// queueNotesVersions queues, last, the read of the notes' versions the
// appends of ops ask for, and passes each its user's (NotesRead) as the
// pipeline's results come: an early call's request takes its user's kept
// notes by that version (sessions' notesGate), with no round trip of its
// own.
func queueNotesVersions(b *pgx.Batch, ops []*writeOp) {
	var users []string
	for _, op := range ops {
		if u := op.app.NotesOf; u != "" && op.app.NotesRead != nil && !slices.Contains(users, u) {
			users = append(users, u)
		}
	}
	if len(users) == 0 {
		return
	}
	b.Queue(pgNotesVersions, users).Query(func(rows pgx.Rows) error {
		got, err := scanNotesVersions(rows, len(users))
		if err != nil {
			return err
		}
		for _, op := range ops {
			if op.app.NotesOf != "" && op.app.NotesRead != nil {
				op.app.NotesRead(got[op.app.NotesOf])
			}
		}
		return nil
	})
}

// queueAppends queues the statements of ops in order. Consecutive appends
// to distinct conversations share statements; an append to a conversation
// already in the group starts the next group, so it sees the writes before
// it as if they ran one by one.
func queueAppends(b *pgx.Batch, ops []*writeOp) {
	seen := map[string]bool{}
	start := 0
	for i, op := range ops {
		if seen[op.app.Conv.ID] {
			queueGroup(b, ops[start:i])
			clear(seen)
			start = i
		}
		seen[op.app.Conv.ID] = true
	}
	queueGroup(b, ops[start:])
}

func queueGroup(b *pgx.Batch, ops []*writeOp) {
	n := len(ops)
	var (
		ids, models           = make([]string, n), make([]string, n)
		expect, count, tokens = make([]int64, n), make([]int64, n), make([]int64, n)
		epochs                = make([]int64, n)
		at                    = make([]time.Time, n)
		cost                  = make([]float64, n)
		active, keep          = make([]bool, n), make([]bool, n)
		rows                  []*ledger.Message
	)
	for i, op := range ops {
		a := op.app
		ids[i], expect[i], count[i], at[i] = a.Conv.ID, a.ExpectSeq, int64(len(a.Messages)), a.At
		tokens[i], cost[i], models[i], active[i], epochs[i] = a.Tokens, a.Cost, a.Model, a.RequireActive, a.Conv.Epoch
		keep[i] = a.KeepActivity
		for j := range a.Messages {
			rows = append(rows, &a.Messages[j])
		}
	}
	b.Queue(pgUpdateConversations, ids, expect, count, at, tokens, cost, models, active, epochs, keep)
	b.Queue(pgInsertMessages, messageColumns(rows)...)
	var answers []ledger.AnswerRow
	for _, op := range ops {
		answers = ledger.AnswerRows(answers, op.app)
	}
	if len(answers) > 0 {
		n := len(answers)
		convs, seqs, leads, replies := make([]string, n), make([]int64, n), make([]int64, n), make([]int64, n)
		for i, r := range answers {
			convs[i], seqs[i], leads[i], replies[i] = r.Conv, r.Seq, r.Lead, r.Reply
		}
		b.Queue(pgAnswerTurns, convs, seqs, leads, replies)
	}
	for _, op := range ops {
		if st := op.app.Settle; st != nil {
			b.Queue(pgSettleTurn, st.DueAt, op.app.Conv.ID, op.app.TurnSeq, st.Owner, int64(st.Attempt))
		}
	}
}

// messageColumns is rows as one array per column of pgInsertMessages.
func messageColumns(rows []*ledger.Message) []any {
	n := len(rows)
	var (
		convs, roles, contents, toolCalls, toolIDs = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		statuses, errs, attachments, quotes        = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		states, owners                             = make([]string, n), make([]string, n)
		clientIDs                                  = make([]*string, n)
		seqs, replyTo, prompt, completion          = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		attempts, leads                            = make([]int64, n), make([]int64, n)
		cost                                       = make([]float64, n)
		created                                    = make([]time.Time, n)
		due                                        = make([]*time.Time, n)
		track                                      = make([]bool, n)
	)
	for i, m := range rows {
		convs[i], seqs[i], roles[i], contents[i], toolCalls[i], toolIDs[i] = m.ConversationID, m.Seq, m.Role, m.Content, m.ToolCalls, m.ToolCallID
		clientIDs[i], replyTo[i], statuses[i], errs[i], prompt[i], completion[i] = m.ClientMsgID, m.ReplyTo, m.Status, m.Error, m.PromptTokens, m.CompletionTkns
		cost[i], created[i], attachments[i], quotes[i] = m.Cost, m.CreatedAt, m.Attachments, m.Quote
		states[i], owners[i], attempts[i], due[i], track[i], leads[i] = m.TurnState, m.TurnOwner, int64(m.TurnAttempt), m.TurnDue, m.TurnTrack, m.TurnLead
	}
	return []any{convs, seqs, roles, contents, toolCalls, toolIDs, clientIDs, replyTo, statuses, errs,
		prompt, completion, cost, created, attachments, states, owners, attempts, due, track, leads, quotes}
}

// appendError is the error an append's own pipeline ended with, as the
// store's callers know it.
func (p *pgPipe) appendError(err error) error {
	pgErr := refusal(err)
	if pgErr == nil {
		return fmt.Errorf("commit: %w", err)
	}
	switch pgErr.Code {
	case pgCodeStale:
		return ledger.ErrStale
	case pgCodeLostClaim:
		return ledger.ErrLostClaim
	}
	return p.translate(err)
}

// commitAppends commits a batch's appends through the pipeline. When the
// server refused one of them, they run again one pipeline each, so that
// no append sees another's failure.
func (p *pgPipe) commitAppends(ops []*writeOp) {
	err := p.run(ops)
	if err == nil {
		return
	}
	if len(ops) > 1 && refusal(err) != nil {
		for _, op := range ops {
			if err := p.run([]*writeOp{op}); err != nil {
				op.err = p.appendError(err)
			}
		}
		return
	}
	for _, op := range ops {
		op.err = p.appendError(err)
	}
}

// refusal is the server's error of a statement (severity ERROR), which
// rolled the pipeline's transaction back, or nil. A lost connection, or a
// session the server ended (FATAL) perhaps after the commit, leaves it
// unknown whether the pipeline landed.
func refusal(err error) *pgconn.PgError {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return nil
	}
	sev := pgErr.SeverityUnlocalized
	if sev == "" {
		sev = pgErr.Severity
	}
	if sev != "ERROR" {
		return nil
	}
	return pgErr
}
