package sessions

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/store"
)

// slowWhenAsked echoes, except that a message containing "slow" waits
// until its turn is cancelled, having said it started.
type slowWhenAsked struct{ started chan struct{} }

func (a slowWhenAsked) Name() string  { return "slow-when-asked" }
func (a slowWhenAsked) Model() string { return "echo" }
func (a slowWhenAsked) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	if strings.Contains(req.Input, "slow") {
		a.started <- struct{}{}
		<-ctx.Done()
		return agent.Reply{}, ctx.Err()
	}
	return agent.Echo{}.Reply(ctx, req, onDelta)
}

// A reply a channel sent while the drain ran out is recorded as
// delivered: the drain deadline cancels the turns still running, not the
// record of a reply already sent. Without the record the turn stays
// answered and undelivered, and the replica that takes over this one's
// turns sends it again — a second reply to one message on a deploy.
func TestDeliveryMarkLandsAfterTheDrainDeadline(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		ag := slowWhenAsked{started: make(chan struct{}, 1)}
		m := New(db, ag, Options{Logger: quiet, Events: db.Events(), InterruptGrace: 5 * time.Second})
		m.Routes().Register("telegram", Route{Deliver: func(context.Context, Delivery) (string, error) { return "sent", nil }, Track: true})
		in := func(user int64, text string) Inbound {
			return Inbound{Channel: "telegram", SessionKey: TelegramDMKey(user), UserID: "u", ChatID: "c", Text: text}
		}
		// Ann's reply is stored; the channel holds it, about to send.
		out, err := m.Handle(context.Background(), in(1, "hello"), Hooks{})
		if err != nil || out.Turn.Claim == "" {
			t.Fatalf("Handle = %+v, %v; want a reply under a delivery claim", out, err)
		}
		// Bob's turn runs past the drain deadline.
		go m.Handle(context.Background(), in(2, "slow question"), Hooks{})
		<-ag.started
		expired, cancel := context.WithCancel(context.Background())
		cancel()
		if err := m.Shutdown(expired); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		// The channel sent Ann's reply meanwhile, and records it.
		if err := m.Delivered(context.Background(), out.Turn, "sent", nil); err != nil {
			t.Fatalf("Delivered after the drain deadline: %v", err)
		}
		tr, err := db.TurnAt(context.Background(), out.ConversationID, out.UserSeq)
		if err != nil || tr == nil || tr.State != TurnDelivered {
			t.Fatalf("Ann's turn after its mark: %+v, %v; want delivered", tr, err)
		}
	})
}
