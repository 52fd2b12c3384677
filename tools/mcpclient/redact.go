package mcpclient

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/url"
	"slices"
	"strings"
)

// An HTTP server's URL may hold secrets: a user and password, an API key
// in its query. The errors of its sessions (connect errors name the URL
// they posted to) and the SDK's logs about it are scrubbed of them before
// they leave the server's supervisor: the status (LastError), every log
// line and Call's errors show the URL as redactURL does, with no
// userinfo and "?…" for the query.

// minSecret is the shortest password or query value that is also hidden
// where it appears on its own, outside of the URL: a shorter one (a
// "?v=1") would cut up every message it happens to occur in.
const minSecret = 4

// redactURL is raw without its userinfo, fragment and query values ("?…").
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(not a URL)"
	}
	q := u.RawQuery != "" || u.ForceQuery
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	s := u.String()
	if q {
		s += "?…"
	}
	return s
}

// scrubber replaces what an HTTP server's URL holds secret in a text; nil
// (nothing to hide) leaves texts as they are.
type scrubber struct{ r *strings.Replacer }

// newScrubber is the scrubber for a server reached at raw ("" for a
// stdio server or an explicit transport: nil).
func newScrubber(raw string) *scrubber {
	u, err := url.Parse(raw)
	if raw == "" || err != nil || (u.User == nil && u.RawQuery == "" && u.Fragment == "") {
		return nil
	}
	shown := redactURL(raw)
	// The URL whole, as the SDK and net/http write it (a url.Error masks
	// the password only), then its parts wherever else they turn up.
	whole := []string{raw, u.String(), u.Redacted()}
	if u.User != nil {
		whole = append(whole, strings.Replace(u.String(), u.User.String()+"@", u.User.Username()+":***@", 1))
	}
	var parts []string
	if u.User != nil {
		parts = append(parts, u.User.String()+"@", u.User.Username()+":***@")
		if pw, ok := u.User.Password(); ok && len(pw) >= minSecret {
			parts = append(parts, pw, url.UserPassword("", pw).String()[1:])
		}
	}
	if u.RawQuery != "" {
		parts = append(parts, "?"+u.RawQuery)
		for _, pair := range strings.Split(u.RawQuery, "&") {
			_, v, _ := strings.Cut(pair, "=")
			if len(v) < minSecret {
				continue
			}
			parts = append(parts, v)
			if un, err := url.QueryUnescape(v); err == nil && len(un) >= minSecret {
				parts = append(parts, un)
			}
		}
	}
	// strings.Replacer tries its old strings in order at each position:
	// longest first, so a part of a longer one never wins over it.
	slices.SortStableFunc(whole, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	slices.SortStableFunc(parts, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	var pairs []string
	for _, s := range whole {
		pairs = append(pairs, s, shown)
	}
	for _, s := range parts {
		if s != "" {
			pairs = append(pairs, s, "…")
		}
	}
	return &scrubber{r: strings.NewReplacer(pairs...)}
}

// text is s without the URL's secrets.
func (sc *scrubber) text(s string) string {
	if sc == nil {
		return s
	}
	return sc.r.Replace(s)
}

// err is err as a text without the URL's secrets. It wraps nothing: the
// error it came from still holds them.
func (sc *scrubber) err(err error) error {
	if sc == nil || err == nil {
		return err
	}
	return errors.New(sc.text(err.Error()))
}

// logger is log with every message and attribute scrubbed.
func (sc *scrubber) logger(log *slog.Logger) *slog.Logger {
	if sc == nil {
		return log
	}
	return slog.New(scrubHandler{next: log.Handler(), sc: sc})
}

// scrubHandler scrubs the records it passes on to next.
type scrubHandler struct {
	next slog.Handler
	sc   *scrubber
}

func (h scrubHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h scrubHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.sc.text(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h scrubHandler) WithAttrs(as []slog.Attr) slog.Handler {
	scrubbed := make([]slog.Attr, len(as))
	for i, a := range as {
		scrubbed[i] = h.attr(a)
	}
	return scrubHandler{next: h.next.WithAttrs(scrubbed), sc: h.sc}
}

func (h scrubHandler) WithGroup(name string) slog.Handler {
	return scrubHandler{next: h.next.WithGroup(name), sc: h.sc}
}

// attr is a without the URL's secrets: a value that prints with them
// becomes the scrubbed text.
func (h scrubHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		g := v.Group()
		out := make([]slog.Attr, len(g))
		for i, ga := range g {
			out[i] = h.attr(ga)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(out...)}
	}
	s := v.String()
	if t := h.sc.text(s); t != s {
		return slog.String(a.Key, t)
	}
	return slog.Attr{Key: a.Key, Value: v}
}
