package sessions

// What a turn's tool rounds store, and how: a round's results stored while
// the model is called with them (roundStore), the appends of a round's
// messages, found rather than made twice after an answer that was lost
// (appendRound), and a storage step retried until storage answers
// (untilStored).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptrace"
	"sync"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// roundStore is the store of a round's results, under way while the
// model is called with them: the outcome of the call that ended last,
// then the results as tool messages. What the model streams meanwhile is
// held until they are stored, as an early call's is until its message
// is (earlyCall.release); a store that fails for good fails the turn, and the
// model's answer is dropped. So the commit overlaps the model's time to
// first token instead of coming before it: a crash before it lands loses
// the results as it would have just before the model call — the call is
// found started and unanswered, and settled as such.
//
// The store starts once the model request is written (an HTTP backend's
// request, seen through httptrace), so that its work does not delay the
// request on a busy machine; at the latest when the model answers.
type roundStore struct {
	done  chan struct{}
	err   error
	store func() error
	once  sync.Once

	mu       sync.Mutex
	stored   bool
	held     []string
	onDelta  func(string)
	released bool
}

// hold returns onDelta held until the store lands.
func (rs *roundStore) hold(onDelta func(string)) func(string) {
	rs.mu.Lock()
	rs.onDelta = onDelta
	rs.mu.Unlock()
	return func(d string) {
		rs.start() // (an answer before the request was seen written)
		rs.mu.Lock()
		defer rs.mu.Unlock()
		if !rs.released {
			rs.held = append(rs.held, d)
			return
		}
		if onDelta != nil {
			onDelta(d)
		}
	}
}

// land records the store's outcome and passes the held deltas on when it
// succeeded.
func (rs *roundStore) land(err error) {
	rs.mu.Lock()
	rs.err = err
	if err == nil {
		rs.released = true
		if rs.onDelta != nil {
			for _, d := range rs.held {
				rs.onDelta(d)
			}
		}
		rs.held = nil
	}
	rs.mu.Unlock()
	close(rs.done)
}

// start starts the store, once.
func (rs *roundStore) start() {
	rs.once.Do(func() { go func() { rs.land(rs.store()) }() })
}

// sent is ctx telling rs to start once a request made under it is
// written.
func (rs *roundStore) sent(ctx context.Context) context.Context { return whenWritten(ctx, rs.start) }

// whenWritten is ctx calling fn each time an HTTP request made under it
// is written (httptrace), the sign an agent's model request is out: a
// store that overlaps the model call starts then rather than before, so
// that its work does not delay the request (here, and a message's commit
// behind its early call, Manager.startEarly).
func whenWritten(ctx context.Context, fn func()) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { fn() }})
}

// wait starts the store if it has not started, waits for it and returns
// its error.
func (rs *roundStore) wait() error {
	if rs == nil {
		return nil
	}
	rs.start()
	<-rs.done
	return rs.err
}

// appendRound stores messages of the turn that do not settle it (a
// round's assistant message, or its results) after the conversation's
// last message, under the turn's claim, and returns them with their seqs.
// A storage failure is retried until storage answers; an append that
// landed unseen is found, not made twice; one the database rejects
// (ErrRejected) fails the turn.
func (m *Manager) appendRound(ctx context.Context, tt *toolTurn, msgs []ledger.Message, tokens int64, cost float64, model models) ([]ledger.Message, error) {
	hc, key := tt.hc, tt.in.SessionKey
	wait := min(50*time.Millisecond, m.opts.RetryPause)
	var failed error
	for {
		unlock, err := m.lockState(ctx, key, false)
		if err != nil {
			return nil, err
		}
		if failed == nil {
			for i := range msgs {
				msgs[i].Seq = hc.conv.LastSeq + int64(i) + 1
			}
			failed = m.store.Append(ctx, ledger.Append{Conv: &hc.conv, ExpectSeq: hc.conv.LastSeq, Messages: msgs, At: m.now(),
				Tokens: tokens, Cost: cost, Model: model.recorded(), TurnSeq: tt.claim.Lead, Usage: m.standing.usageFor(&hc.conv, msgs, model.name, m.now(), 0, false)})
			if failed == nil {
				hc.push(msgs...)
				m.hot.Update(key, hc)
				unlock()
				return msgs, nil
			}
			if errors.Is(failed, ledger.ErrRejected) {
				// Refused, not lost: it did not land, and never will.
				unlock()
				m.log.ErrorContext(ctx, "a tool round was rejected by the database; the turn fails", slog.String("conversation", hc.conv.ID),
					slog.String("error", failed.Error()))
				return nil, failed
			}
		}
		// Did it land after all, is the turn still this runner's, and
		// where does the conversation end now?
		landed, err := m.roundLanded(ctx, tt, msgs)
		unlock()
		switch {
		case err == nil && landed:
			m.hot.Remove(key)
			return msgs, nil
		case err == nil:
			failed = nil // the conversation moved on (hc refreshed): append after it
			continue
		case errors.Is(err, ledger.ErrLostClaim) || errors.Is(err, ledger.ErrClosed):
			return nil, err
		}
		if m.life.base.Err() != nil {
			return nil, err // the drain's deadline passed: the next run finishes the round
		}
		m.log.WarnContext(ctx, "storing a tool round failed; retried until storage answers", slog.String("conversation", hc.conv.ID),
			slog.String("error", err.Error()))
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, context.Cause(ctx)
		}
		wait = min(wait*2, 4*m.opts.RetryPause)
	}
}

// roundLanded reports whether msgs are stored already (an append whose
// answer was lost), setting their seqs; else it refreshes the cached
// conversation for the next try. It fails with ErrLostClaim when the turn
// is no longer this runner's.
func (m *Manager) roundLanded(ctx context.Context, tt *toolTurn, msgs []ledger.Message) (bool, error) {
	hc := tt.hc
	t, err := m.store.TurnAt(ctx, hc.conv.ID, tt.claim.Lead)
	if err != nil {
		return false, err
	}
	if t == nil || t.Owner != tt.claim.Owner || t.Attempts != tt.claim.Attempt {
		return false, fmt.Errorf("storing a tool round: %w", ledger.ErrLostClaim)
	}
	after, err := m.store.MessagesAfter(ctx, hc.conv.ID, tt.claim.Lead, 0)
	if err != nil {
		return false, err
	}
	// Stored text is storable text (ledger.StorableText): msgs are
	// compared as the store keeps them.
	text := ledger.StorableText
	same := func(a, b *ledger.Message) bool {
		return a.Role == b.Role && a.ReplyTo == b.ReplyTo && a.ToolCallID == text(b.ToolCallID) && a.ToolCalls == text(b.ToolCalls) &&
			a.Content == text(b.Content)
	}
	for i := range after {
		if i+len(msgs) > len(after) {
			break
		}
		match := true
		for j := range msgs {
			if !same(&after[i+j], &msgs[j]) {
				match = false
				break
			}
		}
		if match {
			for j := range msgs {
				msgs[j].Seq = after[i+j].Seq
			}
			return true, nil
		}
	}
	fresh, err := m.store.Conversation(ctx, hc.conv.ID)
	if err != nil {
		return false, err
	}
	if fresh == nil {
		return false, fmt.Errorf("conversation %s vanished", hc.conv.ID)
	}
	window, err := m.store.RecentMessages(ctx, fresh.ID, hc.cap)
	if err != nil {
		return false, err
	}
	hc.reset(*fresh, window)
	return false, nil
}

// untilStored runs a storage step until it succeeds, retrying a storage
// failure with backoff; it gives up on ErrLostClaim, ErrClosed,
// ErrRejected (the database refuses what the step carries, and would
// every time: the turn fails instead), or when ctx ends.
func (m *Manager) untilStored(ctx context.Context, what string, step func() error) error {
	wait := min(50*time.Millisecond, m.opts.RetryPause)
	warned := false
	for {
		err := step()
		if err == nil || errors.Is(err, ledger.ErrLostClaim) || errors.Is(err, ledger.ErrClosed) {
			return err
		}
		if errors.Is(err, ledger.ErrRejected) {
			m.log.ErrorContext(ctx, what+" was rejected by the database; the turn fails", slog.String("error", err.Error()))
			return err
		}
		if ctx.Err() != nil {
			return errors.Join(context.Cause(ctx), err)
		}
		if m.life.base.Err() != nil {
			return err // the drain's deadline passed: the next run finds what is stored
		}
		if !warned {
			warned = true
			m.log.WarnContext(ctx, what+" failed; retried until storage answers", slog.String("error", err.Error()))
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errors.Join(context.Cause(ctx), err)
		}
		wait = min(wait*2, 4*m.opts.RetryPause)
	}
}
