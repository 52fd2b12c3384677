package telegram

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/telegramtest"
)

// A state the tracker built before one already stored is not stored after
// it. Update 101 waits in its chat while 100 finishes: 100's state (offset
// 101, nothing held) is built first, but the poller's state holding 101
// (offset 102) is stored first, after which the poller asks Telegram from
// 102 on, confirming 101. Stored last, 100's older state would leave 101
// neither held nor below the offset: a replica killed then would lose it.
func TestOlderOffsetStateIsNotStoredOverANewerOne(t *testing.T) {
	api := telegramtest.New(t)
	h := start(t, api, t.TempDir(), setup{agent: agent.Echo{}})
	b := h.bot
	ctx := context.Background()
	// The state's key names the bot, known once it has connected.
	select {
	case <-b.connected:
	case <-time.After(10 * time.Second):
		t.Fatal("the bot did not connect within 10s")
	}
	// The bot's own poller stops first: a term it starts again would load
	// the state this test stores and replay the update held in it, storing
	// a state of its own over the one checked below.
	h.stop()
	<-h.done
	o := newOffsetTracker(offsetState{Offset: 100})
	o.start(update{Update: tgbotapi.Update{UpdateID: 100}})
	o.start(update{Update: tgbotapi.Update{UpdateID: 101}})
	older := o.finish(100)
	ids, newer := o.holdWaiting()
	if !b.persist(ctx, o, newer) {
		t.Fatal("the newer state was not stored")
	}
	for _, id := range ids {
		o.holdStored(id)
	}
	if o.offset() != 102 {
		t.Fatalf("offset after holding 101 = %d, want 102", o.offset())
	}
	if !b.persist(ctx, o, older) {
		t.Fatal("persist of the older state reported false; a newer one holding what it held is stored")
	}
	v, err := b.sess.ChannelState(ctx, b.stateKey("offset"))
	if err != nil {
		t.Fatal(err)
	}
	var st offsetState
	if err := json.Unmarshal([]byte(v), &st); err != nil {
		t.Fatal(err)
	}
	if st.Offset != 102 || len(st.Held) != 1 || st.Held[0].Update.UpdateID != 101 {
		t.Fatalf("stored state = %s; want offset 102 with 101 held", v)
	}
}
