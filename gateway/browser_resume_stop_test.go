package gateway

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/agent"
)

// slowOn streams a piece and then waits for release (or its context) when
// the input is "slow"; it echoes anything else at once.
type slowOn struct{ release chan struct{} }

func (s slowOn) Name() string  { return "slow" }
func (s slowOn) Model() string { return "slow" }
func (s slowOn) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	if req.Input == "slow" {
		onDelta("partial ")
		select {
		case <-ctx.Done():
			return agent.Reply{}, ctx.Err()
		case <-s.release:
		}
	}
	return agent.Echo{}.Reply(ctx, req, nil)
}

// Going back to the previous conversation while a reply streams: that
// reply belongs to the conversation left (its frames no longer come), so
// the Stop button goes with its bubble.
func TestPreviousWhileStreamingHidesStop(t *testing.T) {
	ag := slowOn{release: make(chan struct{})}
	e := newEnv(t, ag, WSOptions{}, nil, nil)
	t.Cleanup(func() { close(ag.release) }) // registered last: runs before the env stops
	ctx := browser(t)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/?user=kim"),
		waitText("#status", "online as kim"),
		sendText("one"),
		waitText(".msg.assistant", "echo: one (history: 0)"),
		chromedp.Click("#reset"),
		waitText(".notice", "New conversation"),
		sendText("slow"),
		waitText(".msg.assistant.streaming", "partial"),
		waitJS(`!document.getElementById('stop').hidden`),
		chromedp.Click("#previous"),
		waitText(".notice", "Back to your previous conversation"),
	); err != nil {
		t.Fatal(err)
	}
	hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('stop').hidden && !document.querySelector('.msg.assistant.streaming')`))
	if err != nil || !hidden {
		t.Fatalf("after going back the Stop button or the streaming bubble is still shown (%v)", err)
	}
}
