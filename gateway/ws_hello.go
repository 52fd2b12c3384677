package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"regexp"
	"time"

	"github.com/gorilla/websocket"

	"github.com/chatgate/chatgate/sessions"
)

// hello and ready: the frame that makes a connection someone's. hello
// settles the principal (auth token, resume token, a name in development
// mode, or a generated guest), registers the connection for its session
// key and opens the conversation; ready answers with the session token,
// the history (after last_seq on a resume, else the conversation's tail)
// and what this server accepts, then the tool calls of the key waiting
// for a decision (askAgain).

var userRE = regexp.MustCompile(`^[A-Za-z0-9_.@+-]{1,64}$`)

// doHello authenticates, resumes or opens the session, and sends ready. It
// returns false when the connection was closed.
func (c *wsConn) doHello(f *clientFrame) bool {
	ws := c.ws
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !ws.DevMode() && c.principal == "" {
		if f.Token == "" {
			c.fail(errUnauthorized, websocket.ClosePolicyViolation)
			return false
		}
		if c.principal = ws.principalFor(f.Token); c.principal == "" {
			c.fail(errUnauthorized.with("unknown token"), websocket.ClosePolicyViolation)
			return false
		}
	}
	if ws.anonymous() {
		f.User = "" // a guest never names itself
	}
	if ws.DevMode() && f.User != "" && !userRE.MatchString(f.User) {
		c.sendError(errBadFrame.with("user must be 1–64 of A–Z a–z 0–9 _ . @ + -"))
		c.close(websocket.ClosePolicyViolation, "bad user")
		return false
	}
	resumed := false
	if f.Session != "" {
		owner, err := ws.sess.ResumePrincipal(ctx, Channel, f.Session)
		if err != nil {
			c.fail(errInternal.with("could not check the session token"), websocket.CloseInternalServerErr)
			return false
		}
		switch {
		case owner == "":
		case !ws.DevMode():
			resumed = owner == c.principal
		case f.User == "" || f.User == owner:
			c.principal, resumed = owner, true
		}
	}
	if c.principal == "" {
		c.principal = f.User
	}
	if c.principal == "" {
		var b [8]byte
		rand.Read(b[:])
		c.principal = sessions.GuestPrefix + hex.EncodeToString(b[:])
	}
	token := f.Session
	if !resumed {
		var err error
		if token, err = ws.sess.NewResumeToken(ctx, Channel, c.principal); err != nil {
			c.fail(errInternal.with("could not issue a session token"), websocket.CloseInternalServerErr)
			return false
		}
	}
	c.key = sessions.WebSocketKey(c.principal)
	ws.register(c)
	in := sessions.Inbound{Channel: Channel, SessionKey: c.key, UserID: c.principal}
	afterSeq := int64(-1)
	if resumed && f.LastSeq != nil {
		afterSeq = *f.LastSeq
	}
	limit := 1000
	if afterSeq < 0 {
		limit = ws.cur.Load().historyLimit
	}
	t, err := ws.sess.Open(ctx, in, afterSeq, limit)
	if err == nil && afterSeq >= 0 && f.Conversation != "" && f.Conversation != t.Conversation {
		// The client's last_seq counts in a conversation that has since
		// been archived: send the new one's tail instead.
		t, err = ws.sess.Open(ctx, in, -1, ws.cur.Load().historyLimit)
	}
	if err != nil {
		if errors.Is(err, sessions.ErrShuttingDown) {
			c.fail(errUnavailable, websocket.CloseGoingAway)
		} else {
			c.fail(errInternal.with("could not load the conversation"), websocket.CloseInternalServerErr)
		}
		return false
	}
	c.moved(t.Conversation, t.LastSeq)
	c.greet(encode(readyFrame{Type: "ready", Session: token, Conversation: t.Conversation, Resumed: resumed, User: c.principal, History: historyItems(t.Entries),
		MaxFrameBytes: ws.opts.MaxFrameBytes, Images: ws.readsImages(), Audio: ws.opts.Transcriber != nil, MaxAudioBytes: ws.maxAudioBytes(),
		Models: ws.sess.OffersModels()}))
	c.askAgain(ctx)
	return true
}

// maxAudioBytes is ready's max_audio_bytes: 0 when audio is not
// transcribed.
func (ws *WebSocket) maxAudioBytes() int64 {
	if ws.opts.Transcriber == nil {
		return 0
	}
	return ws.opts.MaxAudioBytes
}

// readsImages reports whether the session manager's agent is given the
// images clients send.
func (ws *WebSocket) readsImages() bool { return ws.sess.ReadsImages() }

// historyItems is a transcript's lines as ready carries them.
func historyItems(entries []sessions.Entry) []historyItem {
	out := make([]historyItem, 0, len(entries))
	for _, e := range entries {
		item := historyItem{Seq: e.Seq, Role: e.Role, Text: e.Text, Status: e.Status, ID: e.ClientMsgID, ReplyTo: e.ReplyTo,
			Quote: e.Quote, Attachments: historyAttachments(e.Attachments)}
		for _, m := range mediaAttachments(e.Media) {
			item.Attachments = append(item.Attachments, historyAttachment(m))
		}
		out = append(out, item)
	}
	return out
}
