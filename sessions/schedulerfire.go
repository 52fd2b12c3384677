package sessions

// One fire, run: claimed, checked against the budgets, its message stored
// as a turn of the target conversation (Submit, with the fire's client
// id), its outcome delivered through the channel's route, and the fire
// settled from its turn.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// fireRun is one fire about to run: what its message is, and where.
type fireRun struct {
	key     string // the fire's schedule key
	subject string // the schedule's (or reminder's) key its message and spend name
	due     time.Time
	target  ScheduleTarget
	text    string
	// tokensPerDay is the schedule's own budget (0: none).
	tokensPerDay int64
	// adopt: the fire's message is stored already (adoptStored): it runs
	// on from it, past the checks a fire meets before its message.
	adopt bool
	// dropped, when set, says why a fire claimed is not to run after all
	// ("": it runs): a reminder cancelled since it was read as due.
	dropped func(ctx context.Context) string
}

// runOperator runs the fire due at due of operator schedule sc: for an
// all_sessions schedule's own key, the fan-out to every session that
// opted in (each then a fire of its own key); otherwise the turn.
func (s *Scheduler) runOperator(ctx context.Context, sc OperatorSchedule, key, sessionKey string, due, now time.Time) {
	target := sc.Target
	if target.AllSessions {
		if sessionKey == "" {
			s.fanOut(ctx, sc, key, due, now)
			return
		}
		target.SessionKey, target.AllSessions = sessionKey, false
	}
	s.runFire(ctx, fireRun{key: key, subject: schedules.OperatorKey(sc.Name), due: due, target: target,
		text: operatorText(sc, due, now), tokensPerDay: sc.TokensPerDay}, now)
}

// runReminder runs the fire due at due of reminder r.
func (s *Scheduler) runReminder(ctx context.Context, r *ledger.Reminder, due, now time.Time) {
	key := schedules.ReminderKey(r.ID)
	s.runFire(ctx, fireRun{key: key, subject: key, due: due,
		target: ScheduleTarget{Channel: r.Channel, SessionKey: r.SessionKey}, text: reminderText(r, due, now),
		dropped: func(ctx context.Context) string {
			// Cancelled while its due time was being taken: read again
			// under the claim, so that a cancel answered "cancelled"
			// before the claim is one.
			if now, err := s.store.Reminder(ctx, r.ID); err == nil && (now == nil || now.CancelledAt != nil) {
				return "the reminder was cancelled"
			}
			return ""
		}}, now)
}

// fanOut claims the fire of an all_sessions schedule and plans, at the
// same due time, one fire for each session of its channel that opted in:
// each is claimed, run and settled on its own (OperatorSessionKey). A
// fan-out cut by a crash is claimed again when its lease runs out and
// plans again; fires planned already are left as they are.
func (s *Scheduler) fanOut(ctx context.Context, sc OperatorSchedule, key string, due, now time.Time) {
	held, ok, err := s.claim(ctx, key, due, "", now)
	if err != nil || !ok {
		s.logErr(err)
		return
	}
	n := 0
	for after := ""; ; {
		keys, err := s.store.OptedIn(ctx, sc.Name, sc.Target.Channel, after, 1000)
		if err != nil {
			s.logErr(err) // the claim lapses, and the fan-out runs again
			return
		}
		if len(keys) == 0 {
			break
		}
		fires := make([]ledger.ScheduleFire, len(keys))
		for i, k := range keys {
			fires[i] = ledger.ScheduleFire{ScheduleKey: schedules.OperatorSessionKey(sc.Name, k), DueAt: due, SessionKey: k, CreatedAt: now}
		}
		if _, err := s.store.PlanFires(ctx, fires); err != nil {
			s.logErr(err)
			return
		}
		n += len(keys)
		after = keys[len(keys)-1]
	}
	// The fan-out itself sends nothing: its outcome is not counted.
	s.logErr(s.store.SettleFire(ctx, ledger.FireEnd{ScheduleKey: key, DueAt: due, From: ledger.FireClaimed, Owner: held.Owner,
		Attempt: held.Attempt, State: ledger.FireSent, Reason: fmt.Sprintf("fanned out to %d sessions that opted in", n), At: s.now()}))
}

// claim claims the fire (key, due) for this replica.
func (s *Scheduler) claim(ctx context.Context, key string, due time.Time, sessionKey string, now time.Time) (ledger.FireHeld, bool, error) {
	return s.store.ClaimFire(ctx, ledger.FireClaim{ScheduleKey: key, DueAt: due, SessionKey: sessionKey, Owner: s.replica,
		LeaseUntil: now.Add(s.opts.Lease), At: now})
}

// runFire runs one fire: claim, budgets, the message stored as a turn,
// and — on a goroutine — its outcome delivered and the fire settled.
func (s *Scheduler) runFire(ctx context.Context, f fireRun, now time.Time) {
	// A schedule with a budget of its own runs only as many fires at once
	// as its budget has room for (admit): its spend is tallied when a
	// reply is stored, so fires checked side by side (an all_sessions
	// schedule's) would all pass the check before any of them spent. The
	// others stay due for the next pass.
	done := func() {}
	if f.tokensPerDay > 0 && !f.adopt {
		release, ok := s.admit(ctx, f)
		if !ok {
			s.took.Add(-1) // not run: no backlog of its own
			return
		}
		done = release
	}
	handedOff := false
	defer func() {
		if !handedOff {
			done()
		}
	}()
	held, ok, err := s.claim(ctx, f.key, f.due, f.target.SessionKey, now)
	if err != nil || !ok {
		s.logErr(err)
		return
	}
	// The fire's span, once it is this replica's to run.
	ctx, end := s.tr.traceFire(ctx, f.key, f.due, now)
	state := ledger.FireClaimed
	defer func() { end(state, err) }()
	kind := fireKind(f.key)
	if f.dropped != nil && !f.adopt {
		if why := f.dropped(ctx); why != "" {
			s.settleClaimed(ctx, held, ledger.FireDropped, why, now)
			state = ledger.FireDropped
			return
		}
	}
	s.obs.FireClaimed(kind, now.Sub(f.due))
	if why := s.overBudget(ctx, f); why != "" && !f.adopt {
		s.settleClaimed(ctx, held, ledger.FireSkippedBudget, why, now)
		state = ledger.FireSkippedBudget
		return
	}
	if f.target.ChatID == "" && f.target.UserID == "" {
		// A reminder's or an opt-in's target is its session key: its
		// address is read back from it, so that the fire's conversation
		// and its delivery have the chat (a Telegram reply with none is
		// undeliverable).
		if user, chat, ok := AddressOf(f.target.SessionKey); ok {
			f.target.UserID, f.target.ChatID = user, chat
		}
	}
	in := Inbound{Channel: f.target.Channel, SessionKey: f.target.SessionKey, UserID: f.target.UserID, ChatID: f.target.ChatID,
		ClientMsgID: ledger.FireMsgID(f.subject, f.due), Text: f.text, Scheduled: true}
	t, err := s.host.Submit(ctx, in, Hooks{})
	switch {
	case errors.Is(err, ErrShuttingDown):
		return // the claim lapses; the next start, or another replica, runs it
	case errors.Is(err, ErrBadInbound), errors.Is(err, ErrEmptyMessage), errors.Is(err, ErrTooLong), errors.Is(err, ErrBadText), errors.Is(err, ErrFireID):
		s.settleClaimed(ctx, held, ledger.FireFailed, "its message was refused: "+err.Error(), now)
		state = ledger.FireFailed
		return
	case err != nil:
		s.log.Warn("storing a fire's message failed; it is claimed again when its lease runs out", slog.String("fire", f.key),
			slog.Time("due", f.due), slog.String("error", err.Error()))
		return
	}
	// Stored: from now on the turn ledger runs it. A claim lost meanwhile
	// (this replica was too slow, its lease ran out) is harmless: whoever
	// claimed it finds this message stored, by its client id.
	if serr := s.store.StoreFireTurn(ctx, held, t.ConversationID(), t.Seq(), s.now()); serr != nil && !errors.Is(serr, ledger.ErrLostClaim) {
		s.logErr(serr) // the claim lapses; the next claimer finds the message and records it
	} else if serr == nil {
		state = ledger.FireStored
	}
	s.waits.Add(1)
	handedOff = true
	go func() {
		defer s.waits.Done()
		defer done()
		s.deliverFire(t, in, f)
	}()
}

// deliverFire waits for the fire's turn and delivers its reply through
// the channel's route (nobody else waits for it), then settles the fire.
// A turn that does not end here (the process stops) is the rescuer's, and
// the fire is settled by a later pass.
func (s *Scheduler) deliverFire(t *Ticket, in Inbound, f fireRun) {
	out, err := t.Wait(s.base)
	if err != nil {
		return
	}
	switch {
	case out.Merged, out.Pending, out.Reply.Seq == 0:
		// Another turn, runner or delivery carries the reply.
	case out.Turn.Claim != "", !out.Duplicate && !s.routes.tracks(in.Channel):
		// Under the delivery's claim (a channel that confirms delivery:
		// also for the fire's message found stored again, whose turn ran
		// here), or the reply's first outcome on one that does not.
		s.routes.deliver(s.base, Delivery{Channel: in.Channel, SessionKey: in.SessionKey, UserID: in.UserID, ChatID: in.ChatID,
			ClientMsgID: in.ClientMsgID, UserSeq: out.UserSeq, Reply: out.Reply, Turn: out.Turn})
	}
	s.settleTurn(s.base, f.key, f.due, t.ConversationID(), t.Seq())
}

// admit lets a fire of a schedule with its own budget run, when the
// budget has room for it beside the schedule's fires running here: the
// tallied spend plus, for each running and this one, the most a fire of
// the schedule has spent so far (learnt by settleTurn). Until one has
// settled, one runs at a time. A schedule over its budget admits every
// fire: each is then claimed and skipped, with no model call.
func (s *Scheduler) admit(ctx context.Context, f fireRun) (func(), bool) {
	spent, err := s.scheduleSpent(ctx, f)
	if err != nil {
		return nil, false // the next pass tries again
	}
	s.spendMu.Lock()
	defer s.spendMu.Unlock()
	if spent < f.tokensPerDay {
		n, per := s.inflight[f.subject], s.perFire[f.subject]
		if n > 0 && (per == 0 || spent+int64(n+1)*per > f.tokensPerDay) {
			return nil, false
		}
	}
	s.inflight[f.subject]++
	return func() {
		s.spendMu.Lock()
		defer s.spendMu.Unlock()
		if s.inflight[f.subject]--; s.inflight[f.subject] <= 0 {
			delete(s.inflight, f.subject)
		}
	}, true
}

// scheduleSpent is what the schedule's fires spent today, as its budget
// counts it.
func (s *Scheduler) scheduleSpent(ctx context.Context, f fireRun) (int64, error) {
	p := s.host.Policy(f.target.Channel)
	loc := budgetLocation(p)
	day := ledger.UsageDayKey(s.now().In(loc), loc)
	today, _, err := s.store.UserUsage(ctx, f.subject, day, ledger.UsageMonthStart(day))
	if err != nil {
		s.log.Warn("reading a schedule's usage failed", slog.String("fire", f.key), slog.String("error", err.Error()))
		return 0, err
	}
	return today.PromptTokens + today.CompletionTokens, nil
}

// learnSpend records what a fire of subject spent, for admit.
func (s *Scheduler) learnSpend(subject string, tokens int64) {
	s.spendMu.Lock()
	defer s.spendMu.Unlock()
	s.perFire[subject] = max(s.perFire[subject], tokens)
}

// overBudget says why the fire may not call the model, or "": its user
// over their budget, or the schedule over its own.
func (s *Scheduler) overBudget(ctx context.Context, f fireRun) string {
	p := s.host.Policy(f.target.Channel)
	if us := s.standing.overBudget(ctx, Inbound{Channel: f.target.Channel, SessionKey: f.target.SessionKey}, p); us != nil {
		return "the user is over their budget (" + us.Over() + ")"
	}
	if f.tokensPerDay <= 0 {
		return ""
	}
	spent, err := s.scheduleSpent(ctx, f)
	if err != nil {
		return "" // admit read it a moment ago: the fire runs
	}
	if spent >= f.tokensPerDay {
		return fmt.Sprintf("the schedule is over its own budget (tokens_per_day %d)", f.tokensPerDay)
	}
	return ""
}

// settleClaimed settles a fire this replica holds, without a turn.
func (s *Scheduler) settleClaimed(ctx context.Context, h ledger.FireHeld, state, reason string, now time.Time) {
	err := s.store.SettleFire(ctx, ledger.FireEnd{ScheduleKey: h.ScheduleKey, DueAt: h.DueAt, From: ledger.FireClaimed, Owner: h.Owner,
		Attempt: h.Attempt, State: state, Reason: reason, At: now})
	if err != nil {
		s.logErr(err) // the claim lapses, and the fire is decided again
		return
	}
	s.obs.FireEnded(fireKind(h.ScheduleKey), state)
}

// settleUnrun settles a claimable fire that is not to run — failed, or
// dropped — with the reason: claimed first, so that exactly one runner
// settles it.
func (s *Scheduler) settleUnrun(ctx context.Context, f ledger.ScheduleFire, now time.Time, state, reason string) {
	held, ok, err := s.claim(ctx, f.ScheduleKey, f.DueAt, f.SessionKey, now)
	if err != nil || !ok {
		s.logErr(err)
		return
	}
	s.settleClaimed(ctx, held, state, reason, now)
}

// settleEnded settles the fires whose turns are stored and have ended:
// those whose runner died, or whose delivery came later.
func (s *Scheduler) settleEnded(ctx context.Context) error {
	fires, err := s.store.StoredFires(ctx, s.opts.Batch)
	if err != nil {
		return err
	}
	for _, f := range fires {
		s.settleTurn(ctx, f.ScheduleKey, f.DueAt, f.ConversationID, f.TurnSeq)
	}
	return nil
}

// settleTurn settles a stored fire from its turn, once the turn has
// ended: its reply delivered (on a channel that confirms delivery) or
// stored (on one that does not) is sent, or quiet when it had nothing to
// report; a failure notice, a delivery refused for good, or a turn too
// old to run is failed; a reply refused for the user's budget is
// skipped_budget. A turn still open leaves the fire stored.
func (s *Scheduler) settleTurn(ctx context.Context, key string, due time.Time, convID string, seq int64) {
	st := s.store
	t, err := st.TurnAt(ctx, convID, seq)
	if err != nil || t == nil {
		s.logErr(err)
		return
	}
	state, reason := "", ""
	switch {
	case t.State == ledger.TurnExpired:
		state, reason = ledger.FireFailed, "the turn was too old to run when it was found"
	case !t.Settled(), t.Track && t.State != ledger.TurnDelivered:
		return // running, or its delivery not confirmed yet
	}
	if state == "" {
		reply, err := st.Message(ctx, convID, t.ReplySeq)
		if err != nil || reply == nil {
			s.logErr(err)
			return
		}
		if name, _, id, ok := schedules.ParseKey(key); ok && id == 0 {
			s.learnSpend(schedules.OperatorKey(name), reply.PromptTokens+reply.CompletionTkns)
		}
		switch {
		case reply.Status == ledger.MsgFailed && strings.HasPrefix(reply.Error, ledger.OverBudgetPrefix):
			state, reason = ledger.FireSkippedBudget, reply.Error
		case reply.Status != ledger.MsgOK:
			state, reason = ledger.FireFailed, cmpOr(reply.Error, "the reply's status is "+reply.Status)
		case t.Track && t.Error != "":
			state, reason = ledger.FireFailed, "undeliverable: "+t.Error
		case schedules.IsQuiet(reply.Content):
			state = ledger.FireQuiet
		default:
			state = ledger.FireSent
		}
	}
	err = s.store.SettleFire(ctx, ledger.FireEnd{ScheduleKey: key, DueAt: due, From: ledger.FireStored, State: state, Reason: reason,
		DeliveryRef: t.DeliveryRef, At: s.now()})
	if errors.Is(err, ledger.ErrLostClaim) {
		return // settled already, here or by another replica
	}
	if err != nil {
		s.logErr(err)
		return
	}
	s.obs.FireEnded(fireKind(key), state)
	if t.Track && t.Error != "" {
		s.stopUndeliverable(ctx, key)
	}
}

// stopUndeliverable ends what made a fire whose chat refused its reply
// for good (the user blocked the bot, the chat is gone): a reminder is
// cancelled, a session's opt-in withdrawn, so that they stop calling the
// model for replies nobody can get. An operator's schedule to one chat
// is the operator's to change; its failures show in the metrics.
func (s *Scheduler) stopUndeliverable(ctx context.Context, key string) {
	name, sessionKey, reminder, ok := schedules.ParseKey(key)
	switch {
	case !ok:
	case reminder > 0:
		r, err := s.store.Reminder(ctx, reminder)
		if err != nil || r == nil {
			s.logErr(err)
			return
		}
		if _, err := s.store.CancelReminder(ctx, r.ID, r.SessionKey, s.now()); err != nil {
			s.logErr(err)
			return
		}
		s.log.Info("a reminder's chat refused its reply for good; the reminder is cancelled", slog.Int64("reminder", r.ID))
	case sessionKey != "":
		sc, known := s.Schedules()[name]
		if !known {
			return
		}
		if err := s.store.SetScheduleOptIn(ctx, ledger.ScheduleOptIn{SessionKey: sessionKey, Schedule: name, Channel: sc.Target.Channel,
			CreatedAt: s.now()}, false); err != nil {
			s.logErr(err)
			return
		}
		s.log.Info("a session's chat refused a fire's reply for good; its opt-in is withdrawn", slog.String("schedule", name))
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// operatorText is the message of an operator schedule's fire: the prompt,
// framed as the schedule's, not the user's words.
func operatorText(sc OperatorSchedule, due, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[Scheduled task %q, set by the operator of this bot, not written by the user; due %s", sc.Name, localTime(due, sc.When.Location()))
	lateNote(&b, due, now)
	b.WriteString("]\n\n")
	b.WriteString(sc.Prompt)
	if sc.Quiet {
		fmt.Fprintf(&b, "\n\nIf there is nothing worth telling the user now, answer exactly %s and nothing else.", schedules.QuietReply)
	}
	return b.String()
}

// reminderText is the message of a reminder's fire.
func reminderText(r *ledger.Reminder, due, now time.Time) string {
	loc, err := schedules.LoadLocation(r.Timezone)
	if err != nil {
		loc = time.UTC
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[Reminder the user asked for, due %s", localTime(due, loc))
	lateNote(&b, due, now)
	b.WriteString("; remind them of it now]\n\n")
	b.WriteString(r.Text)
	return b.String()
}

func localTime(t time.Time, loc *time.Location) string {
	if loc == nil {
		loc = time.UTC
	}
	return t.In(loc).Format("Mon 2 Jan 2006 15:04 MST")
}

// lateNote tells the model that the fire runs late, and why.
func lateNote(b *strings.Builder, due, now time.Time) {
	if late := now.Sub(due); late > schedules.OnTime {
		fmt.Fprintf(b, "; it runs %s late, because the bot was not running at that time (the reply is marked late)", late.Round(time.Minute))
	}
}
