package sessions

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Resume tokens let a channel's client come back to its session after a
// disconnect, on any replica. A token is 256 random bits; the store keeps
// only its SHA-256, bound to the principal it was issued to and the time
// it was issued; it expires Options.ResumeTTL later.

// ErrResumeExpired is ResumePrincipal's answer for a token older than the
// resume TTL: it resumes nothing, and nothing is opened from it.
var ErrResumeExpired = errors.New("resume token expired")

// binding is a resume token's channel_states value.
type binding struct {
	Principal string    `json:"principal"`
	Issued    time.Time `json:"issued"`
}

func (b binding) encode(issued time.Time) string {
	b.Issued = issued.UTC()
	v, _ := json.Marshal(b)
	return string(v)
}

// parseBinding reads a binding; a bare principal (written before tokens
// carried their issue time) is legacy.
func parseBinding(v string) (b binding, legacy bool) {
	if strings.HasPrefix(v, "{") && json.Unmarshal([]byte(v), &b) == nil && b.Principal != "" {
		return b, false
	}
	return binding{Principal: v}, true
}

// expired says whether the token bound by b is older than ttl at now. A
// ttl of 0 never expires, nor does a binding without its issue time (a
// legacy one, until PurgeStates stamps it).
func (b binding) expired(ttl time.Duration, now time.Time) bool {
	return ttl > 0 && !b.Issued.IsZero() && now.Sub(b.Issued) > ttl
}

// NewResumeToken issues a token for principal and stores its binding.
func (c *Conversations) NewResumeToken(ctx context.Context, channel, principal string) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("resume token: %w", err)
	}
	token := base64.RawURLEncoding.EncodeToString(b[:])
	if err := c.store.SetState(ctx, resumeKey(channel, token), binding{Principal: principal}.encode(c.now())); err != nil {
		return "", err
	}
	return token, nil
}

// ResumePrincipal returns the principal a token was issued to, "" for an
// unknown token, or ErrResumeExpired for one older than the resume TTL.
func (c *Conversations) ResumePrincipal(ctx context.Context, channel, token string) (string, error) {
	if token == "" || len(token) > 128 {
		return "", nil
	}
	v, err := c.store.GetState(ctx, resumeKey(channel, token))
	if err != nil || v == "" {
		return "", err
	}
	b, _ := parseBinding(v)
	if b.expired(c.resumeTTL, c.now()) {
		return "", ErrResumeExpired
	}
	return b.Principal, nil
}

func resumePrefix(channel string) string { return channel + ":resume:" }

func resumeKey(channel, token string) string {
	sum := sha256.Sum256([]byte(token))
	return resumePrefix(channel) + hex.EncodeToString(sum[:])
}
