package sessions

import (
	"context"
	"log/slog"
	"time"
)

// GuestPrefix starts the generated principal of a WebSocket guest. A guest
// has nothing but its resume token to come back with, so its active
// conversation follows the retention period too.
const GuestPrefix = "guest-"

// guestKeyPrefix is the session key prefix of WebSocket guests.
var guestKeyPrefix = WebSocketKey(GuestPrefix)

// resumeGrace: a resume token is issued a moment before its principal's
// first conversation is opened; a binding with no conversation is only
// dead once it is older than this.
const resumeGrace = time.Hour

// PurgeGuests deletes the active conversations of WebSocket guests idle
// longer than the retention period (archived ones go with Purge). Each is
// deleted under its session key's lock and dropped from the cache, so a
// guest who comes back exactly then starts a new conversation.
func (s *Sweeper) PurgeGuests(ctx context.Context) (int64, error) {
	if s.cfg.retentionDays <= 0 {
		return 0, nil
	}
	cutoff := s.now().AddDate(0, 0, -s.cfg.retentionDays)
	var n int64
	for {
		convs, err := s.store.IdleActive(ctx, "websocket", guestKeyPrefix, cutoff, 500)
		if err != nil {
			return n, err
		}
		gone := 0
		for _, c := range convs {
			release, err := s.host.lockState(ctx, c.SessionKey, false)
			if err != nil {
				return n, err
			}
			ok, err := s.store.DeleteIdle(ctx, c.ID, cutoff)
			if ok {
				s.hot.Remove(c.SessionKey)
				n++
				gone++
			}
			release()
			if err != nil {
				return n, err
			}
		}
		if len(convs) < 500 || gone == 0 {
			return n, nil
		}
	}
}

// PurgeStates deletes the channel_states rows nobody can use any more:
// resume tokens older than the resume TTL, and those of principals whose
// every conversation has been purged. Other rows (Telegram's offset) stay.
// A binding written before tokens carried their issue time is stamped
// with now, so it expires one TTL from its first purge.
func (s *Sweeper) PurgeStates(ctx context.Context) (int64, error) {
	now := s.now()
	var n int64
	for _, channel := range []string{"websocket"} {
		prefix := resumePrefix(channel)
		after := prefix
		for {
			rows, err := s.store.StateRows(ctx, prefix, after, 1000)
			if err != nil {
				return n, err
			}
			if len(rows) == 0 {
				break
			}
			after = rows[len(rows)-1].Key
			var dead []string
			owners := map[string][]string{} // session key → its bindings
			for _, r := range rows {
				b, legacy := parseBinding(r.Value)
				switch {
				case legacy:
					if err := s.store.SetState(ctx, r.Key, b.encode(now)); err != nil {
						return n, err
					}
				case b.expired(s.cfg.resumeTTL, now):
					dead = append(dead, r.Key)
				case now.Sub(b.Issued) > resumeGrace:
					k := WebSocketKey(b.Principal)
					owners[k] = append(owners[k], r.Key)
				}
			}
			keys := make([]string, 0, len(owners))
			for k := range owners {
				keys = append(keys, k)
			}
			live, err := s.store.KeysWithConversations(ctx, keys)
			if err != nil {
				return n, err
			}
			for k, names := range owners {
				if !live[k] {
					dead = append(dead, names...)
				}
			}
			d, err := s.store.DeleteStates(ctx, dead)
			n += d
			if err != nil {
				return n, err
			}
			if len(rows) < 1000 {
				break
			}
		}
	}
	return n, nil
}

// retention runs the hourly purge: archived conversations past the
// retention period, idle guests, then the states that pointed at them,
// and the settled fires of schedules.
func (s *Sweeper) retention(ctx context.Context) (int64, error) {
	p, err := s.RunRetention(ctx)
	if p.States > 0 {
		s.log.Info("purged channel states", slog.Int64("rows", p.States))
	}
	if p.Fires > 0 {
		s.log.Info("purged schedule fires", slog.Int64("rows", p.Fires))
	}
	return p.Conversations, err
}

// Purged is what one run of the retention purge deleted: conversations
// (archived, and guests' idle ones), channel_states rows (the choices of
// model among them), and settled fires of schedules and reminders.
type Purged struct {
	Conversations int64
	States        int64
	Fires         int64
}

// RunRetention runs the retention purge once: archived conversations past
// storage.retention_days, guests' conversations idle that long, then the
// channel_states rows nobody can use any more, the choices of model of
// keys left with no conversation, and the fires settled that long ago
// (each schedule's latest kept: the scheduler counts what it missed from
// it).
func (s *Sweeper) RunRetention(ctx context.Context) (Purged, error) {
	var p Purged
	var err error
	if p.Conversations, err = s.Purge(ctx); err != nil {
		return p, err
	}
	g, err := s.PurgeGuests(ctx)
	p.Conversations += g
	if err != nil {
		return p, err
	}
	p.States, err = s.PurgeStates(ctx)
	if err != nil || s.cfg.retentionDays <= 0 {
		return p, err
	}
	cutoff := s.now().AddDate(0, 0, -s.cfg.retentionDays)
	// A choice stays as long as its key has a conversation; without one,
	// for the retention period after it was made.
	c, err := s.store.PurgeModelChoices(ctx, cutoff)
	if c > 0 {
		s.choices.forgetChoice("")
	}
	p.States += c
	if err != nil {
		return p, err
	}
	p.Fires, err = s.store.PurgeFires(ctx, cutoff)
	return p, err
}
