package sessions

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
)

// Resume tokens let a channel's client come back to its session after a
// disconnect, on any replica. A token is 256 random bits; the store keeps
// only its SHA-256, bound to the principal it was issued to.

// NewResumeToken issues a token for principal and stores its binding.
func (m *Manager) NewResumeToken(ctx context.Context, channel, principal string) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("resume token: %w", err)
	}
	token := base64.RawURLEncoding.EncodeToString(b[:])
	if err := m.store.SetState(ctx, resumeKey(channel, token), principal); err != nil {
		return "", err
	}
	return token, nil
}

// ResumePrincipal returns the principal a token was issued to, or "" for an
// unknown token.
func (m *Manager) ResumePrincipal(ctx context.Context, channel, token string) (string, error) {
	if token == "" || len(token) > 128 {
		return "", nil
	}
	return m.store.GetState(ctx, resumeKey(channel, token))
}

func resumeKey(channel, token string) string {
	sum := sha256.Sum256([]byte(token))
	return channel + ":resume:" + hex.EncodeToString(sum[:])
}

// Open returns the session key's active conversation, opening one if there
// is none, and its messages after afterSeq (or the last limit messages when
// afterSeq < 0), at most limit (0: no limit with afterSeq). A running turn's
// reply, if not yet stored, is not among them; the turn delivers it.
func (m *Manager) Open(ctx context.Context, in Inbound, afterSeq int64, limit int) (*Conversation, []Message, error) {
	if in.Channel == "" || in.SessionKey == "" {
		return nil, nil, ErrBadInbound
	}
	conv, err := m.store.ActiveConversation(ctx, in.SessionKey)
	if err != nil {
		return nil, nil, err
	}
	if conv == nil {
		release, err := m.acquire(ctx, in.SessionKey)
		if err != nil {
			return nil, nil, err
		}
		hc, err := m.load(ctx, in, m.Policy(in.Channel), m.now())
		release()
		if err != nil {
			return nil, nil, err
		}
		c := hc.conv
		conv = &c
	}
	var msgs []Message
	if afterSeq >= 0 {
		msgs, err = m.store.MessagesAfter(ctx, conv.ID, afterSeq, limit)
	} else {
		msgs, err = m.store.RecentMessages(ctx, conv.ID, limit)
	}
	return conv, msgs, err
}

// ChannelState reads a value a channel keeps through the store (such as
// Telegram's update offset); "" when unset.
func (m *Manager) ChannelState(ctx context.Context, key string) (string, error) {
	return m.store.GetState(ctx, key)
}

// SetChannelState durably stores a channel's value.
func (m *Manager) SetChannelState(ctx context.Context, key, value string) error {
	return m.store.SetState(ctx, key, value)
}
