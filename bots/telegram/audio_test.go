package telegram

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/internal/oteltest"
	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// voiceBot starts a bot whose agent is the openai backend on a local
// server that answers chat calls and transcribes the audio it is given
// a transcript for.
func voiceBot(t *testing.T, api *telegramtest.Server, opts Options) (*harness, *llmtest.Server) {
	t.Helper()
	llm, ag := llmtest.TranscribingAgent(t, false)
	opts.Transcriber = agent.TranscriberOf(ag)
	return start(t, api, t.TempDir(), setup{agent: ag, opts: opts}), llm
}

// storedMessages are every stored message of the session key, in order;
// none when it has no conversation.
func storedMessages(t *testing.T, h *harness, key string) []sessions.Message {
	t.Helper()
	ctx := context.Background()
	convs, err := h.db.ListConversations(ctx, store.ListFilter{SessionKey: key})
	if err != nil {
		t.Fatal(err)
	}
	var out []sessions.Message
	for _, c := range convs {
		msgs, err := h.db.RecentMessages(ctx, c.ID, 100)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, msgs...)
	}
	return out
}

// A voice note is downloaded, transcribed and answered from its
// transcript as a typed message: the model is given the transcript, the
// message is stored as it with the voice note's metadata, and the reply
// shows the transcript quoted above the model's answer, which is stored
// alone.
func TestVoiceNoteIsAnsweredFromItsTranscript(t *testing.T) {
	api := telegramtest.New(t)
	h, llm := voiceBot(t, api, Options{})
	voice := []byte("OggS\x00voice-note-bytes")
	said := "remind me to *call* mum at 5 & buy <milk>"
	llm.AddAudio(voice, said)
	api.AddFile("v1", voice)
	api.Push(telegramtest.VoiceOf(7, "", "v1", len(voice)))

	reply := api.WaitSent(t, 1)[0].Text
	if want := "<blockquote>remind me to *call* mum at 5 &amp; buy &lt;milk&gt;</blockquote>\n\n" + llmtest.Reply; reply != want {
		t.Fatalf("reply = %q, want %q", reply, want)
	}
	if err := telegramtest.CheckHTML(reply); err != nil {
		t.Fatalf("reply's HTML: %v", err)
	}
	if in := lastUser(llm.Requests()[0]); in.Text() != said {
		t.Fatalf("model got %q, want the transcript", in.Text())
	}
	tr := llm.Transcriptions()
	if len(tr) != 1 || tr[0].FileName != "voice.ogg" || tr[0].ContentType != "audio/ogg" || string(tr[0].Data) != string(voice) {
		t.Fatalf("transcription requests = %+v", tr)
	}
	msgs := storedMessages(t, h, "telegram:dm:7")
	if len(msgs) != 2 {
		t.Fatalf("stored = %+v", msgs)
	}
	atts := attachmentsOf(t, msgs[0])
	if msgs[0].Content != said || len(atts) != 1 || atts[0].Kind != agent.KindAudio || atts[0].Type != "voice" ||
		atts[0].FileID != "v1" || atts[0].Mime != "audio/ogg" || atts[0].Size != int64(len(voice)) {
		t.Fatalf("stored user message = %+v", msgs[0])
	}
	if msgs[1].Role != agent.RoleAssistant || msgs[1].Content != llmtest.Reply {
		t.Fatalf("stored reply = %+v: the quote is the channel's, not the model's", msgs[1])
	}

	// An audio file with a caption: the caption follows the transcript;
	// the file goes up under its own name and type.
	memo := []byte("m4a-memo-bytes")
	llm.AddAudio(memo, "the quarterly numbers look fine")
	api.AddFile("a1", memo)
	api.Push(telegramtest.Audio(7, "summarise this", "a1", "memo.m4a", "audio/x-m4a", len(memo)))
	api.WaitSent(t, 2)
	if in := lastUser(llm.Requests()[1]); in.Text() != "the quarterly numbers look fine\n\nsummarise this" {
		t.Fatalf("model got %q", in.Text())
	}
	if tr := llm.Transcriptions(); len(tr) != 2 || tr[1].FileName != "memo.m4a" || tr[1].ContentType != "audio/x-m4a" {
		t.Fatalf("transcription requests = %+v", tr)
	}
	msgs = storedMessages(t, h, "telegram:dm:7")
	if atts := attachmentsOf(t, msgs[2]); len(atts) != 1 || atts[0].Type != "audio" || atts[0].Name != "memo.m4a" || atts[0].Kind != agent.KindAudio {
		t.Fatalf("stored = %+v", msgs[2])
	}
}

// With format plain the transcript is quoted in "> " lines, as written;
// a preview (draft) shows the quote above the text so far too.
func TestVoiceQuotePlainAndPreview(t *testing.T) {
	api := telegramtest.New(t)
	_, llm := voiceBot(t, api, Options{Format: FormatPlain, Streaming: StreamDraft})
	voice := []byte("OggS-two-lines")
	llm.AddAudio(voice, "first *thing*\nsecond thing")
	api.AddFile("v1", voice)
	api.Push(telegramtest.Voice(7, "", "v1"))
	want := "> first *thing*\n> second thing\n\n" + llmtest.Reply
	if got := api.WaitSent(t, 1)[0].Text; got != want {
		t.Fatalf("reply = %q, want %q", got, want)
	}
	drafts := api.Drafts()
	if len(drafts) == 0 || drafts[len(drafts)-1].Text != want {
		t.Fatalf("drafts = %+v", drafts)
	}
}

// Voice over agent.openai.max_audio_bytes is refused with a reply saying
// so, before any download when Telegram gives its size; nothing is
// stored, its caption neither, and nothing is transcribed.
func TestVoiceOverTheLimitIsRefused(t *testing.T) {
	api := telegramtest.New(t)
	h, llm := voiceBot(t, api, Options{MaxAudioBytes: 1024})
	big := []byte(strings.Repeat("x", 2000))
	llm.AddAudio(big, "a long ramble")
	api.AddFile("v-big", big)
	api.Push(telegramtest.VoiceOf(7, "listen to this", "v-big", len(big)))
	want := "That voice message is too long for me to listen to (over 1 KiB); please send a shorter one or type it."
	if got := api.WaitSent(t, 1)[0].Text; got != want {
		t.Fatalf("reply = %q, want %q", got, want)
	}
	if n := len(api.Calls("getFile")); n != 0 {
		t.Fatalf("%d getFile calls for audio known to be over the limit", n)
	}
	// Telegram may leave the size out: the download stops at the limit.
	api.Push(telegramtest.VoiceOf(7, "", "v-big", 0))
	if got := api.WaitSent(t, 2)[1].Text; got != want {
		t.Fatalf("reply = %q, want %q", got, want)
	}
	api.Push(telegramtest.DM(7, "hello"))
	api.WaitSent(t, 3)
	if msgs := storedMessages(t, h, "telegram:dm:7"); len(msgs) != 2 || msgs[0].Content != "hello" {
		t.Fatalf("stored = %+v, want only the text message and its reply", msgs)
	}
	if n := len(llm.Transcriptions()); n != 0 {
		t.Fatalf("%d transcriptions of refused audio", n)
	}
}

// A transcription endpoint that fails, or hears nothing, gets the clear
// reply; nothing is stored and the agent is not called.
func TestVoiceTranscriptionFailureGetsAClearReply(t *testing.T) {
	api := telegramtest.New(t)
	h, llm := voiceBot(t, api, Options{})
	voice, silence := []byte("OggS-mumble"), []byte("OggS-silence")
	llm.AddAudio(voice, "hello there")
	llm.AddAudio(silence, "  ")
	api.AddFile("v1", voice)
	api.AddFile("v2", silence)
	llm.FailTranscriptions(http.StatusInternalServerError)
	api.Push(telegramtest.Voice(7, "", "v1"))
	if got := api.WaitSent(t, 1)[0].Text; got != "I couldn't make out that voice message; please try again or type it." {
		t.Fatalf("reply = %q", got)
	}
	llm.FailTranscriptions(0)
	api.Push(telegramtest.Voice(7, "", "v2"))
	if got := api.WaitSent(t, 2)[1].Text; got != "I couldn't make out that voice message; please try again or type it." {
		t.Fatalf("reply to silence = %q", got)
	}
	if msgs := storedMessages(t, h, "telegram:dm:7"); len(msgs) != 0 {
		t.Fatalf("stored = %+v", msgs)
	}
	if n := len(llm.Requests()); n != 0 {
		t.Fatalf("%d model calls", n)
	}
	// The endpoint back: the same voice note is answered.
	api.Push(telegramtest.Voice(7, "", "v1"))
	if got := api.WaitSent(t, 3)[2].Text; !strings.HasSuffix(got, llmtest.Reply) || !strings.HasPrefix(got, "<blockquote>hello there</blockquote>") {
		t.Fatalf("reply = %q", got)
	}
}

// Audio of a type the endpoint does not take is told so and its caption
// answered, as an unreadable file is.
func TestAudioOfAnotherTypeIsTold(t *testing.T) {
	api := telegramtest.New(t)
	h, llm := voiceBot(t, api, Options{})
	api.AddFile("a1", []byte("aac"))
	api.Push(telegramtest.Audio(7, "what song is this?", "a1", "x.aac", "audio/aac", 3))
	sent := api.WaitSent(t, 2)
	if sent[0].Text != "I can't listen to this kind of audio (audio/aac); please send it as mp3, m4a, ogg, wav or flac, or type it." ||
		sent[1].Text != llmtest.Reply {
		t.Fatalf("sent = %q", texts(sent))
	}
	if msgs := storedMessages(t, h, "telegram:dm:7"); len(msgs) != 2 || msgs[0].Content != "what song is this?" ||
		attachmentsOf(t, msgs[0])[0].Kind != agent.KindOther {
		t.Fatalf("stored = %+v", msgs)
	}
	if len(llm.Transcriptions()) != 0 || api.Downloads() != 0 {
		t.Fatal("audio of a type the endpoint does not take was fetched")
	}
}

// The transcription is a span "transcribe" under the update's span, with
// the audio's size, the limit and the type; audio over the limit is an
// event on the update's span.
func TestTracingTranscription(t *testing.T) {
	rec := oteltest.New(t)
	api := telegramtest.New(t)
	_, llm := voiceBot(t, api, Options{TracerProvider: rec, MaxAudioBytes: 4096})
	voice := []byte("OggS-traced")
	llm.AddAudio(voice, "trace me")
	api.AddFile("v1", voice)
	api.Push(telegramtest.VoiceOf(7, "", "v1", len(voice)))
	api.WaitSent(t, 1)
	rec.WaitEnded(t, "telegram update", 1)
	spans := rec.Named("transcribe")
	if len(spans) != 1 {
		t.Fatalf("spans: %v", rec.Names())
	}
	s, update := spans[0], rec.Named("telegram update")[0]
	if s.Parent.SpanID() != update.SpanContext.SpanID() {
		t.Error("transcribe is not a child of the update's span")
	}
	for key, want := range map[string]string{
		"audio.bytes": strconv.Itoa(len(voice)), "audio.limit_bytes": "4096", "audio.mime": "audio/ogg", "chatgate.channel": Channel,
	} {
		if got := oteltest.Attr(s, key); got != want {
			t.Errorf("transcribe %s = %q, want %q", key, got, want)
		}
	}
	if !s.EndTime.After(s.StartTime) {
		t.Errorf("transcribe lasted %v", s.EndTime.Sub(s.StartTime))
	}

	api.Push(telegramtest.VoiceOf(7, "", "v-huge", 5000))
	api.WaitSent(t, 2)
	rec.WaitEnded(t, "telegram update", 2)
	refused := rec.Named("telegram update")[1]
	if !oteltest.HasEvent(refused, "audio over the size limit") || len(rec.Named("transcribe")) != 1 {
		t.Fatalf("the refused voice note: events %v, spans %v", refused.Events, rec.Names())
	}
	if ev := refused.Events[0]; fmt.Sprint(ev.Attributes) == "" || !strings.Contains(fmt.Sprint(ev.Attributes), "5000") {
		t.Errorf("event attributes = %v", ev.Attributes)
	}
}

// A voice note whose message cannot be stored yet is retried with what
// was heard: downloaded, transcribed and told about once, answered once
// storage takes it.
func TestVoiceRetriedIsTranscribedOnce(t *testing.T) {
	api := telegramtest.New(t)
	llm, ag := llmtest.TranscribingAgent(t, false)
	retried := make(chan struct{}, 100)
	h := start(t, api, t.TempDir(), setup{
		agent: ag,
		opts:  Options{Transcriber: agent.TranscriberOf(ag)},
		sleep: func(ctx context.Context, d time.Duration) error {
			select {
			case retried <- struct{}{}:
			default:
			}
			return scaled(ctx, d)
		},
		beforeStart: func(h *harness) {
			if err := h.db.Gorm().Exec(poison).Error; err != nil { // refuses a message whose text is "poison"
				t.Fatal(err)
			}
		},
	})
	voice := []byte("OggS-poison")
	llm.AddAudio(voice, "poison")
	api.AddFile("v1", voice)
	api.Push(telegramtest.Voice(7, "", "v1"))
	for range 3 {
		select {
		case <-retried:
		case <-time.After(10 * time.Second): // a hang guard, not a speed check
			t.Fatal("the unstored voice note was not retried")
		}
	}
	if err := h.db.Gorm().Exec("DROP TRIGGER poison").Error; err != nil {
		t.Fatal(err)
	}
	if got := api.WaitSent(t, 1)[0].Text; got != "<blockquote>poison</blockquote>\n\n"+llmtest.Reply {
		t.Fatalf("reply = %q", got)
	}
	if n, d := len(llm.Transcriptions()), api.Downloads(); n != 1 || d != 1 {
		t.Fatalf("%d transcriptions and %d downloads for one voice note", n, d)
	}
}

// A transcription is a model call the user causes, so a user over their
// budget causes none: their voice is neither downloaded nor transcribed,
// nothing is stored, and they are told which limit they reached and when
// it frees up. Under budget, and again once the day is over, voice is
// transcribed and answered. The spend is a real answered turn's, tallied
// by the store (each answer of llmtest spends 2 tokens).
func TestVoiceOverBudgetIsNotTranscribed(t *testing.T) {
	for _, pg := range []bool{false, true} {
		t.Run(map[bool]string{false: "sqlite", true: "postgres"}[pg], func(t *testing.T) {
			llm, ag := llmtest.TranscribingAgent(t, false)
			clock := clocktest.New(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
			s := setup{agent: ag, opts: Options{Transcriber: agent.TranscriberOf(ag), Now: clock.Now, Streaming: StreamOff},
				policies: map[string]sessions.Policy{Channel: {MaxHistory: 100,
					Budget: sessions.BudgetPolicy{Default: sessions.Budget{TokensPerDay: 2}}}},
				manager: func(o *sessions.Options) { o.Now = clock.Now }}
			if pg {
				s.dsn = pgtest.DSN(t)
			}
			api := telegramtest.New(t)
			h := start(t, api, t.TempDir(), s)
			first, second := []byte("OggS-first"), []byte("OggS-second")
			llm.AddAudio(first, "what's on today?")
			llm.AddAudio(second, "and tomorrow?")
			api.AddFile("v1", first)
			api.AddFile("v2", second)

			api.Push(telegramtest.Voice(7, "", "v1"))
			if got := api.WaitSent(t, 1)[0].Text; got != "<blockquote>what's on today?</blockquote>\n\n"+llmtest.Reply {
				t.Fatalf("reply under budget = %q", got)
			}

			api.Push(telegramtest.Voice(7, "briefly", "v2"))
			want := "You have reached today's limit of 2 tokens, so I did not listen to that voice message (it is not kept). " +
				"You can send it again from Tue 2 Jun 00:00 UTC (in 12 h 0 min)."
			if got := api.WaitSent(t, 2)[1].Text; got != want {
				t.Fatalf("reply over budget = %q, want %q", got, want)
			}
			if tr := llm.Transcriptions(); len(tr) != 1 {
				t.Fatalf("%d transcription requests, want only the one under budget", len(tr))
			}
			if n := api.Downloads(); n != 1 {
				t.Fatalf("%d downloads, want only the voice under budget", n)
			}
			if n := len(llm.Requests()); n != 1 {
				t.Fatalf("%d model calls", n)
			}
			if msgs := storedMessages(t, h, "telegram:dm:7"); len(msgs) != 2 || msgs[0].Content != "what's on today?" {
				t.Fatalf("stored = %+v, want the first voice message and its answer only", msgs)
			}

			clock.Advance(12 * time.Hour) // the budget's next day
			api.Push(telegramtest.Voice(7, "", "v2"))
			if got := api.WaitSent(t, 3)[2].Text; got != "<blockquote>and tomorrow?</blockquote>\n\n"+llmtest.Reply {
				t.Fatalf("reply the next day = %q", got)
			}
		})
	}
}

// failingUsage is the manager with its usage reads failing.
type failingUsage struct{ *sessions.Manager }

func (failingUsage) Usage(context.Context, string, string) (sessions.UsageStanding, error) {
	return sessions.UsageStanding{}, errors.New("usage unreadable")
}

// A usage read that fails lets the voice be transcribed and answered, as
// a turn's own budget check does.
func TestVoiceTranscribedWhenUsageIsUnreadable(t *testing.T) {
	api := telegramtest.New(t)
	llm, ag := llmtest.TranscribingAgent(t, false)
	start(t, api, t.TempDir(), setup{agent: ag, opts: Options{Transcriber: agent.TranscriberOf(ag)},
		policies: map[string]sessions.Policy{Channel: {MaxHistory: 100, Budget: sessions.BudgetPolicy{Default: sessions.Budget{TokensPerDay: 2}}}},
		sess:     func(m *sessions.Manager) Sessions { return allDoors(failingUsage{m}) }})
	voice := []byte("OggS-unchecked")
	llm.AddAudio(voice, "hello")
	api.AddFile("v1", voice)
	api.Push(telegramtest.Voice(7, "", "v1"))
	if got := api.WaitSent(t, 1)[0].Text; got != "<blockquote>hello</blockquote>\n\n"+llmtest.Reply {
		t.Fatalf("reply = %q", got)
	}
}
