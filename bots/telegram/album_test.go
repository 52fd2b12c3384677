package telegram

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// threePhotos adds three pictures to api and returns them as an album's
// full sizes, and what the model is given for each.
func threePhotos(api *telegramtest.Server) ([]telegramtest.PhotoSize, []string) {
	var sizes []telegramtest.PhotoSize
	var want []string
	for i := 1; i <= 3; i++ {
		data := []byte(fmt.Sprintf("jpeg-bytes-of-picture-%d", i))
		id := fmt.Sprintf("pic%d", i)
		api.AddFile(id, data)
		sizes = append(sizes, telegramtest.PhotoSize{FileID: id, Width: 1280, Height: 960, Size: len(data)})
		want = append(want, "data:image/jpeg;base64,"+base64.StdEncoding.EncodeToString(data))
	}
	return sizes, want
}

// albumClock is a bot's fake clock: the album waits run on it.
func albumClock() (*clocktest.Clock, Options) {
	clock := clocktest.New(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	return clock, Options{Vision: true, Now: clock.Now, After: clock.After}
}

// checkAlbumTurn checks that the model was asked once, for the album: its
// caption and its pictures, in order.
func checkAlbumTurn(t *testing.T, llm *llmtest.Server, caption string, pictures []string) {
	t.Helper()
	reqs := llm.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model calls, want one for the album", len(reqs))
	}
	in := reqs[0]
	if n := len(in); n != 1 {
		t.Fatalf("the model got %d messages, want the album as one: %+v", n, in)
	}
	got := in[0].Images()
	if in[0].Text() != caption || strings.Join(got, "|") != strings.Join(pictures, "|") {
		t.Fatalf("the model got %q with %d pictures, want %q with %d", in[0].Text(), len(got), caption, len(pictures))
	}
}

// checkAlbumRow checks the stored user messages of chat: the album as
// one, with its pictures and the first part's client id, then rest.
func checkAlbumRow(t *testing.T, h *harness, chat int64, caption string, firstPart int, rest ...string) {
	t.Helper()
	rows := userRows(t, h, sessions.TelegramDMKey(chat))
	if len(rows) != 1+len(rest) {
		t.Fatalf("%d user messages stored, want the album and %d more: %+v", len(rows), len(rest), rows)
	}
	album, atts := rows[0], attachmentsOf(t, rows[0])
	if album.Content != caption || len(atts) != 3 || album.ClientMsgID == nil || *album.ClientMsgID != clientMsgID(chat, firstPart) {
		t.Fatalf("stored album = %+v with %d attachments", album, len(atts))
	}
	for i, a := range atts {
		if a.Kind != agent.KindImage || a.FileID != fmt.Sprintf("pic%d", i+1) {
			t.Fatalf("attachment %d = %+v", i, a)
		}
	}
	for i, text := range rest {
		if rows[1+i].Content != text {
			t.Fatalf("message %d = %q, want %q", 2+i, rows[1+i].Content, text)
		}
	}
}

// TestAlbumIsOneTurn: a three-picture album — three updates sharing a
// media_group_id, the caption on the first — is one stored message with
// its three pictures, answered by one turn that shows the model all
// three, in every busy mode (collect with no debounce too). The user's
// next message is answered after it, in a turn of its own.
func TestAlbumIsOneTurn(t *testing.T) {
	for _, mode := range []struct {
		name string
		busy sessions.BusyPolicy
	}{
		{"queue", sessions.BusyPolicy{Mode: sessions.BusyQueue}},
		{"collect without debounce", sessions.BusyPolicy{Mode: sessions.BusyCollect}},
		{"interrupt", sessions.BusyPolicy{Mode: sessions.BusyInterrupt}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			api := telegramtest.New(t)
			llm, ag := llmtest.Agent(t, true)
			clock, opts := albumClock()
			h := start(t, api, t.TempDir(), setup{agent: ag, opts: opts, policies: busy(mode.busy)})
			sizes, pictures := threePhotos(api)
			_, ids := api.PushAlbum(telegramtest.AlbumPhotos(7, "which is the best?", sizes...)...)
			// Every part is taken (polling has moved past them) and nothing
			// is stored until the album's wait has passed.
			api.WaitConfirmed(t, api.LastUpdateID())
			if msgs := api.Messages(); len(msgs) != 0 || len(llm.Requests()) != 0 {
				t.Fatalf("before the album's wait: sent %q, %d model calls", texts(msgs), len(llm.Requests()))
			}
			clock.Advance(DefaultAlbumWait)
			sent := api.WaitSent(t, 1)
			if sent[0].Text != llmtest.Reply || sent[0].ReplyTo != ids[0] {
				t.Fatalf("sent %+v, want the reply to the album's first part %d", sent[0], ids[0])
			}
			checkAlbumTurn(t, llm, "which is the best?", pictures)
			api.Push(telegramtest.DM(7, "thanks"))
			if sent := api.WaitSent(t, 2); len(sent) != 2 || len(llm.Requests()) != 2 {
				t.Fatalf("sent %q after the next message, %d model calls; want one reply each", texts(sent), len(llm.Requests()))
			}
			checkAlbumRow(t, h, 7, "which is the best?", ids[0], "thanks")
		})
	}
}

// TestAlbumRestartLosesNoPart: the bot stops with two parts of an album
// taken (polling moved past them, so Telegram will not send them again)
// and the third not yet sent. The next bot, on the same store and Bot
// API, gathers the two from the stored state and the third from
// Telegram, and stores the album once, answered once. On SQLite and on
// PostgreSQL.
func TestAlbumRestartLosesNoPart(t *testing.T) {
	for _, driver := range []string{store.DriverSQLite, store.DriverPostgres} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			dsn := ""
			if driver == store.DriverPostgres {
				dsn = pgtest.DSN(t)
			}
			api := telegramtest.New(t)
			dir := t.TempDir()
			llm, ag := llmtest.Agent(t, true)
			_, opts := albumClock()
			h1 := start(t, api, dir, setup{agent: ag, opts: opts, dsn: dsn})
			sizes, pictures := threePhotos(api)
			parts := telegramtest.AlbumPhotos(7, "which is the best?", sizes...)
			group := api.NewAlbum()
			first := api.PushAlbumPart(group, parts[0])
			api.PushAlbumPart(group, parts[1])
			api.WaitConfirmed(t, api.LastUpdateID())
			h1.shutdown(time.Second)
			if n := len(api.Messages()) + len(llm.Requests()); n != 0 {
				t.Fatalf("the first bot sent or asked the model %d times", n)
			}

			clock, opts := albumClock()
			h2 := start(t, api, dir, setup{agent: ag, opts: opts, dsn: dsn})
			api.PushAlbumPart(group, parts[2])
			waitAlbumParts(t, h2.bot, clock, 3)
			clock.Advance(DefaultAlbumWait)
			if sent := api.WaitSent(t, 1); sent[0].Text != llmtest.Reply || sent[0].ReplyTo != first {
				t.Fatalf("sent %+v, want the reply to the album's first part %d", sent[0], first)
			}
			checkAlbumTurn(t, llm, "which is the best?", pictures)
			api.Push(telegramtest.DM(7, "thanks"))
			if sent := api.WaitSent(t, 2); len(sent) != 2 || len(llm.Requests()) != 2 {
				t.Fatalf("sent %q, %d model calls; want one reply each", texts(sent), len(llm.Requests()))
			}
			checkAlbumRow(t, h2, 7, "which is the best?", first, "thanks")
		})
	}
}

// TestAlbumGivenBackAfterItWasStoredRunsOnce: the bot stops after the
// album was stored and answered but before Telegram heard its parts
// confirmed (the offset state is put back as it was, and Telegram sends
// the parts again). The next bot gathers them again, and the ledger knows
// the album by its first part's client id: nothing runs or is sent twice.
func TestAlbumGivenBackAfterItWasStoredRunsOnce(t *testing.T) {
	api := telegramtest.New(t)
	dir := t.TempDir()
	llm, ag := llmtest.Agent(t, true)
	clock, opts := albumClock()
	deliveries := make(chan string, 4)
	h1 := start(t, api, dir, setup{agent: ag, opts: opts,
		sess: func(m *sessions.Manager) Sessions { return allDoors(deliveryNotes{Manager: m, ch: deliveries}) }})
	sizes, pictures := threePhotos(api)
	_, ids := api.PushAlbum(telegramtest.AlbumPhotos(7, "which is the best?", sizes...)...)
	firstUpdate := api.LastUpdateID() - 2
	api.WaitConfirmed(t, api.LastUpdateID())
	clock.Advance(DefaultAlbumWait)
	api.WaitSent(t, 1)
	waitDelivered(t, h1, sessions.TelegramDMKey(7), deliveries)
	h1.shutdown(time.Second)

	api.Replay(firstUpdate)
	clock, opts = albumClock()
	h2 := start(t, api, dir, setup{agent: ag, opts: opts, beforeStart: func(h *harness) {
		if err := h.mgr.Conversations().SetChannelState(context.Background(), fmt.Sprintf("telegram:%d:offset", telegramtest.BotID), ""); err != nil {
			t.Fatal(err)
		}
	}})
	waitAlbumParts(t, h2.bot, clock, 3)
	clock.Advance(DefaultAlbumWait)
	api.Push(telegramtest.DM(7, "thanks"))
	sent := api.WaitSent(t, 2)
	if len(sent) != 2 || sent[0].ReplyTo != ids[0] || sent[1].Text != llmtest.Reply || len(llm.Requests()) != 2 {
		t.Fatalf("sent %+v, %d model calls; want the album answered once, then the next message", sent, len(llm.Requests()))
	}
	if got := llm.Requests()[1]; len(got) != 3 || len(got[0].Images()) != len(pictures) {
		t.Fatalf("the next turn's history = %+v, want the album once and its reply", got)
	}
	checkAlbumRow(t, h2, 7, "which is the best?", ids[0], "thanks")
}

// waitDelivered waits until the bot has recorded a delivery (noted on
// deliveries, see deliveryNotes), then checks that the newest turn of key
// is marked delivered.
func waitDelivered(t *testing.T, h *harness, key string, deliveries <-chan string) {
	t.Helper()
	select {
	case <-deliveries:
	case <-time.After(20 * time.Second):
		t.Fatalf("the bot recorded no delivery for %s within 20s", key)
	}
	stored(t, h, key)
}

// TestAlbumInAGroup: in a group, an album whose caption (on one part)
// mentions the bot is answered as one message with all its pictures; an
// album nobody addressed to the bot is not.
func TestAlbumInAGroup(t *testing.T) {
	api := telegramtest.New(t)
	llm, ag := llmtest.Agent(t, true)
	clock, opts := albumClock()
	start(t, api, t.TempDir(), setup{agent: ag, opts: opts})
	sizes, pictures := threePhotos(api)
	inGroup := func(parts []map[string]any) []map[string]any {
		for _, p := range parts {
			p["chat"] = map[string]any{"id": int64(-100), "type": "supergroup", "title": "G"}
		}
		return parts
	}
	api.PushAlbum(inGroup(telegramtest.AlbumPhotos(8, "", sizes...))...) // not for the bot
	caption := "@" + telegramtest.BotName + " which is the best?"
	parts := inGroup(telegramtest.AlbumPhotos(8, "", sizes...))
	parts[1]["caption"] = caption
	parts[1]["caption_entities"] = []map[string]any{{"type": "mention", "offset": 0, "length": len(telegramtest.BotName) + 1}}
	_, ids := api.PushAlbum(parts...)
	api.WaitConfirmed(t, api.LastUpdateID())
	clock.Advance(DefaultAlbumWait)
	sent := api.WaitSent(t, 1)
	if sent[0].ChatID != -100 || sent[0].ReplyTo != ids[0] || sent[0].Text != llmtest.Reply {
		t.Fatalf("sent %+v", sent[0])
	}
	checkAlbumTurn(t, llm, "which is the best?", pictures)
	api.Push(telegramtest.Group(-100, 8, "@"+telegramtest.BotName+" thanks"))
	if sent := api.WaitSent(t, 2); len(sent) != 2 || len(llm.Requests()) != 2 {
		t.Fatalf("sent %q, %d model calls; the unaddressed album was answered", texts(sent), len(llm.Requests()))
	}
}

// TestWebhookAlbum: an album's parts posted to the webhook at once are
// one message and one turn; each part's request is answered 200 once the
// album is stored.
func TestWebhookAlbum(t *testing.T) {
	api := telegramtest.New(t)
	llm, ag := llmtest.Agent(t, true)
	clock, opts := albumClock()
	opts.Mode, opts.WebhookURL, opts.WebhookSecret = "webhook", "https://bot.example.com/hook", "s"
	h := start(t, api, t.TempDir(), setup{agent: ag, opts: opts})
	<-h.done
	srv := httptest.NewServer(h.bot.WebhookHandler())
	defer srv.Close()
	sizes, pictures := threePhotos(api)
	var wg sync.WaitGroup
	codes := make([]int, 3)
	for i := range 3 {
		body := fmt.Sprintf(`{"update_id":%d,"message":{"message_id":%d,"date":1,"media_group_id":"77","from":{"id":7,"is_bot":false,"first_name":"U"},"chat":{"id":7,"type":"private"},"photo":[{"file_id":%q,"file_unique_id":"u%d","width":800,"height":600,"file_size":%d}]%s}}`,
			50+i, 500+i, sizes[i].FileID, i, sizes[i].Size, map[bool]string{true: `,"caption":"which is the best?"`}[i == 0])
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
			req.Header.Set("X-Telegram-Bot-Api-Secret-Token", "s")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		}()
	}
	waitAlbumParts(t, h.bot, clock, 3)
	clock.Advance(DefaultAlbumWait)
	wg.Wait()
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 200 {
		t.Fatalf("the parts were answered %v", codes)
	}
	if sent := api.WaitSent(t, 1); sent[0].ReplyTo != 500 {
		t.Fatalf("sent %+v", sent)
	}
	checkAlbumTurn(t, llm, "which is the best?", pictures)
}

// waitAlbumParts waits until the bot's album collector, which waits on
// clock, has seen an album of n parts: the collector sets a timer on clock
// after each part it takes in, so each new timer is a moment to look.
func waitAlbumParts(t *testing.T, b *Bot, clock *clocktest.Clock, n int) {
	t.Helper()
	for timers := 1; ; timers++ {
		if !clock.WaitTimers(timers, 20*time.Second) {
			t.Fatalf("the bot's album collector set no timer %d within 20s", timers)
		}
		b.albums.mu.Lock()
		got := 0
		for _, al := range b.albums.open {
			got = max(got, len(al.parts))
		}
		b.albums.mu.Unlock()
		if got >= n {
			return
		}
	}
}
