package sessions

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/chatgate/chatgate/agent"
)

// Fetcher returns the bytes of an image a user message of its channel
// carried, from its stored metadata (agent.Attachment's FileID or Hash).
// An error — the channel no longer has it, or it is too large — is told
// to the model as agent.MissingImageText.
type Fetcher func(ctx context.Context, a agent.Attachment) ([]byte, error)

// Images are fetched when a turn is built, never stored. At most
// MaxTurnImages per turn, the newest: older images of the history are
// told to the model as no longer available, so that a long conversation
// of pictures does not download them all for every turn.
const (
	MaxTurnImages = 8
	fetchTimeout  = 30 * time.Second
	fetchParallel = 4
)

// fetchImages fills in the bytes of the request's images (inputs, then
// history, newest first) through the channel's Route.Fetch, when the
// agent reads images.
func (r *Routes) fetchImages(ctx context.Context, ag agent.Agent, channel string, req *agent.Request) {
	if !agent.ReadsImages(ag) {
		return
	}
	var want []*agent.Attachment
	collect := func(atts []agent.Attachment) {
		for i := len(atts) - 1; i >= 0; i-- {
			if atts[i].Kind == agent.KindImage && atts[i].Media == "" { // (a tool's: toolMedia.images)
				want = append(want, &atts[i])
			}
		}
	}
	for i := len(req.InputAttachments) - 1; i >= 0; i-- {
		collect(req.InputAttachments[i])
	}
	for i := len(req.History) - 1; i >= 0; i-- {
		collect(req.History[i].Attachments)
	}
	if len(want) == 0 {
		return
	}
	for _, a := range want {
		a.Missing = true // until fetched
	}
	if len(want) > MaxTurnImages {
		want = want[:MaxTurnImages]
	}
	rt, _ := r.route(channel)
	fetch := rt.Fetch
	if fetch == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	var wg sync.WaitGroup
	sem := make(chan struct{}, fetchParallel)
	for _, a := range want {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			data, err := fetch(ctx, *a)
			if err != nil || len(data) == 0 {
				r.log.Info("an image could not be fetched; the model is told it is no longer available",
					slog.String("channel", channel), slog.String("session_key", req.SessionKey), slog.Any("error", err))
				return
			}
			a.Data, a.Missing = data, false
		}()
	}
	wg.Wait()
}
