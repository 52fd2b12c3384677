package gateway

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/storetest"
)

// When the gateway transcribes (ready.audio), the page's file picker
// takes audio too: the file goes as an audio attachment, and the model is
// given its transcript with the text typed, and the + button says it
// takes audio. Without transcription the picker offers pictures only.
func TestWebPageSendsAudio(t *testing.T) {
	e, llm := voiceEnv(t, WSOptions{})
	ctx := browser(t)
	clip := append([]byte("ID3\x03\x00\x00\x00\x00\x00\x00"), "mp3-frames"...)
	llm.AddAudio(clip, "hello from the page")
	file := filepath.Join(t.TempDir(), "memo.mp3")
	if err := os.WriteFile(file, clip, 0o600); err != nil {
		t.Fatal(err)
	}
	err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/?user=ada"),
		waitText("#status", "online as ada"),
		waitJS(`!document.getElementById('attach').hidden && document.getElementById('file').accept.includes('audio/mpeg')`),
		waitJS(`(() => { const b = document.getElementById('attach'); return /audio/.test(b.getAttribute('aria-label')) && /audio/.test(b.title); })()`),
		chromedp.SetUploadFiles("#file", []string{file}),
		waitText(".images .audio", "memo.mp3"),
		sendText("and be brief"),
		waitText(".msg.assistant", llmtest.Reply),
		waitText(".msg.user .attachment", "memo.mp3"),
	)
	if err != nil {
		t.Fatal(err)
	}
	reqs := llm.Requests()
	if in := reqs[0][len(reqs[0])-1]; in.Text() != "hello from the page\n\nand be brief" {
		t.Fatalf("model got %q", in.Text())
	}
	if tr := llm.Transcriptions(); len(tr) != 1 || tr[0].FileName != "memo.mp3" || tr[0].ContentType != "audio/mpeg" {
		t.Fatalf("transcriptions = %+v", tr)
	}

	e2 := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
	if err := chromedp.Do(ctx, chromedp.Navigate(e2.srv.URL+"/?user=ada"), waitText("#status", "online as ada"),
		waitJS(`!document.getElementById('attach').hidden && !document.getElementById('file').accept.includes('audio')`),
		waitJS(`document.getElementById('attach').getAttribute('aria-label') === 'Attach a picture'`)); err != nil {
		t.Fatal(err)
	}
}

// Audio the gateway refuses for a user over their budget is marked on
// the page, with the budget's note, and not resent: it would be refused
// again until the budget frees up.
func TestWebPageAudioOverBudgetIsNotResent(t *testing.T) {
	llm, ag := llmtest.TranscribingAgent(t, false)
	db := storetest.SQLite(t)
	mgr := sessions.New(db, ag, sessions.Options{Logger: quiet, Policies: map[string]sessions.Policy{Channel: {MaxHistory: 100,
		Budget: sessions.BudgetPolicy{Default: sessions.Budget{TokensPerDay: 2}}}}})
	e := serveEnv(t, db, mgr, WSOptions{Transcriber: agent.TranscriberOf(ag), MaxFrameBytes: 1 << 20}, false)
	ctx := browser(t)
	dir := t.TempDir()
	var files []string
	for _, name := range []string{"one", "two"} {
		clip := append([]byte("ID3\x03\x00\x00\x00\x00\x00\x00"), name...)
		llm.AddAudio(clip, "memo "+name)
		files = append(files, filepath.Join(dir, name+".mp3"))
		if err := os.WriteFile(files[len(files)-1], clip, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/?user=ada"),
		waitText("#status", "online as ada"),
		chromedp.SetUploadFiles("#file", files[:1]),
		waitText(".images .audio", "one.mp3"),
		sendText("first"),
		waitText(".msg.assistant", llmtest.Reply),
		chromedp.SetUploadFiles("#file", files[1:]),
		waitText(".images .audio", "two.mp3"),
		sendText("second"),
		waitText(".notice", "so I did not listen to that audio message"),
		waitJS(`document.querySelectorAll('.msg.user.failed').length === 1`),
		waitJS(`localStorage.getItem('chatgate.pending') === '[]'`),
	)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(llm.Transcriptions()); n != 1 {
		t.Fatalf("%d transcriptions, want the one under budget", n)
	}
}
