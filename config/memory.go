package config

import (
	"fmt"
	"io"
	"regexp"
	"sort"
)

// SessionMemory is session.memory: what the bot keeps about a user
// across conversations (notes). Each key on its own overrides the level
// above; Users gives single users (by their memory's user key, a session
// key without its topic, a group member's own key in a shared group
// chat) values of their own, key by key over the channel's.
type SessionMemory struct {
	// Enabled offers the model the memory tools, lets users write notes,
	// and puts the relevant notes in each turn's request (default false).
	Enabled *bool `yaml:"enabled"`
	// InjectTokens bounds the notes a turn's request carries, in
	// estimated tokens (default DefaultInjectTokens; 0: none are put in,
	// the model may still recall them with its tool).
	InjectTokens *int `yaml:"inject_tokens"`
	// MaxNotes is how many notes one user keeps (default DefaultMaxNotes).
	MaxNotes *int `yaml:"max_notes"`
	// ExtractOnReset: when a conversation is archived, a background model
	// call writes what is worth keeping of it as notes (default false).
	ExtractOnReset *bool `yaml:"extract_on_reset"`
	// Approve is how the model's memory tools run: auto (default), or
	// ask — each call waits for the user's decision, as an MCP tool's
	// with approve: ask.
	Approve *string               `yaml:"approve"`
	Users   map[string]MemoryKeys `yaml:"users"`
}

// keys are the level's own keys, without its users.
func (m SessionMemory) keys() MemoryKeys {
	return MemoryKeys{Enabled: m.Enabled, InjectTokens: m.InjectTokens, MaxNotes: m.MaxNotes, ExtractOnReset: m.ExtractOnReset, Approve: m.Approve}
}

// MemoryKeys are one user's keys under session.memory.users.
type MemoryKeys struct {
	// Enabled offers the model the memory tools, lets users write notes,
	// and puts the relevant notes in each turn's request (default false).
	Enabled *bool `yaml:"enabled"`
	// InjectTokens bounds the notes a turn's request carries, in
	// estimated tokens (default DefaultInjectTokens; 0: none are put in,
	// the model may still recall them with its tool).
	InjectTokens *int `yaml:"inject_tokens"`
	// MaxNotes is how many notes one user keeps (default DefaultMaxNotes).
	MaxNotes *int `yaml:"max_notes"`
	// ExtractOnReset: when a conversation is archived, a background model
	// call writes what is worth keeping of it as notes (default false).
	ExtractOnReset *bool `yaml:"extract_on_reset"`
	// Approve is how the model's memory tools run for the user: auto or
	// ask.
	Approve *string `yaml:"approve"`
}

// Defaults and bounds of session.memory.
const (
	DefaultInjectTokens  = 400
	MaxInjectTokens      = 8000
	DefaultMaxNotes      = 200
	MaxMaxNotes          = 10_000
	DefaultMemoryApprove = ApproveAuto
)

// Memory is one set of effective memory settings with their provenance.
type Memory struct {
	Enabled        Value[bool]
	InjectTokens   Value[int]
	MaxNotes       Value[int]
	ExtractOnReset Value[bool]
	Approve        Value[string]
}

// memory resolves a channel's session.memory:
// channels.<c>.session.memory.<key> → session.memory.<key> → default.
func (c *Config) memory(base string, s Session) Memory {
	top, mine := c.Session.Memory, s.Memory
	p := base + ".session.memory."
	return Memory{
		Enabled:        pick(c, false, cand[bool]{p + "enabled", mine.Enabled}, cand[bool]{"session.memory.enabled", top.Enabled}),
		InjectTokens:   pick(c, DefaultInjectTokens, cand[int]{p + "inject_tokens", mine.InjectTokens}, cand[int]{"session.memory.inject_tokens", top.InjectTokens}),
		MaxNotes:       pick(c, DefaultMaxNotes, cand[int]{p + "max_notes", mine.MaxNotes}, cand[int]{"session.memory.max_notes", top.MaxNotes}),
		ExtractOnReset: pick(c, false, cand[bool]{p + "extract_on_reset", mine.ExtractOnReset}, cand[bool]{"session.memory.extract_on_reset", top.ExtractOnReset}),
		Approve:        pick(c, DefaultMemoryApprove, cand[string]{p + "approve", mine.Approve}, cand[string]{"session.memory.approve", top.Approve}),
	}
}

// userMemory resolves the memory settings of each user named under
// session.memory.users at either level: channels.<c>.session.memory.
// users.<u>.<key> → session.memory.users.<u>.<key> → the channel's.
func (c *Config) userMemory(base string, s Session, channel Memory) map[string]Memory {
	names := map[string]bool{}
	for u := range c.Session.Memory.Users {
		names[u] = true
	}
	for u := range s.Memory.Users {
		names[u] = true
	}
	if len(names) == 0 {
		return nil
	}
	inherit := func(v, from string) string {
		if v == "default" {
			return from
		}
		return v
	}
	out := make(map[string]Memory, len(names))
	for u := range names {
		mine, top := s.Memory.Users[u], c.Session.Memory.Users[u]
		cp, tp := base+".session.memory.users."+u+".", "session.memory.users."+u+"."
		m := Memory{
			Enabled:        pick(c, channel.Enabled.V, cand[bool]{cp + "enabled", mine.Enabled}, cand[bool]{tp + "enabled", top.Enabled}),
			InjectTokens:   pick(c, channel.InjectTokens.V, cand[int]{cp + "inject_tokens", mine.InjectTokens}, cand[int]{tp + "inject_tokens", top.InjectTokens}),
			MaxNotes:       pick(c, channel.MaxNotes.V, cand[int]{cp + "max_notes", mine.MaxNotes}, cand[int]{tp + "max_notes", top.MaxNotes}),
			ExtractOnReset: pick(c, channel.ExtractOnReset.V, cand[bool]{cp + "extract_on_reset", mine.ExtractOnReset}, cand[bool]{tp + "extract_on_reset", top.ExtractOnReset}),
			Approve:        pick(c, channel.Approve.V, cand[string]{cp + "approve", mine.Approve}, cand[string]{tp + "approve", top.Approve}),
		}
		m.Enabled.From = inherit(m.Enabled.From, channel.Enabled.From)
		m.InjectTokens.From = inherit(m.InjectTokens.From, channel.InjectTokens.From)
		m.MaxNotes.From = inherit(m.MaxNotes.From, channel.MaxNotes.From)
		m.ExtractOnReset.From = inherit(m.ExtractOnReset.From, channel.ExtractOnReset.From)
		m.Approve.From = inherit(m.Approve.From, channel.Approve.From)
		out[u] = m
	}
	return out
}

// validateMemory checks one level's session.memory (path is "session" or
// "channels.<c>.session").
func (c *Config) validateMemory(path string, m SessionMemory) Errors {
	var errs Errors
	check := func(p string, k MemoryKeys) {
		if n := k.InjectTokens; n != nil && (*n < 0 || *n > MaxInjectTokens) {
			errs = append(errs, c.errAt(p+"inject_tokens", "must be 0–%d (0: no notes put in the request), got %d", MaxInjectTokens, *n))
		}
		if n := k.MaxNotes; n != nil && (*n < 1 || *n > MaxMaxNotes) {
			errs = append(errs, c.errAt(p+"max_notes", "must be 1–%d, got %d", MaxMaxNotes, *n))
		}
		if a := k.Approve; a != nil && *a != ApproveAuto && *a != ApproveAsk {
			errs = append(errs, c.errAt(p+"approve", "%q is not one of auto, ask (turn memory off to keep the model from its tools)", *a))
		}
	}
	check(path+".memory.", m.keys())
	users := make([]string, 0, len(m.Users))
	for u := range m.Users {
		users = append(users, u)
	}
	sort.Strings(users)
	for _, u := range users {
		if u == "" {
			errs = append(errs, c.errAt(path+".memory.users", "a user's key is empty"))
			continue
		}
		if groupChatKey.MatchString(u) {
			c.warn(path+".memory.users."+u, "%q is a group chat: with group_scope chat its members' notes are keyed %s:USER (each member's own), so this entry matches nobody", u, u)
		}
		check(path+".memory.users."+u+".", m.Users[u])
	}
	return errs
}

// groupChatKey is a Telegram group chat's session key without a member.
var groupChatKey = regexp.MustCompile(`^telegram:group:-?[0-9]+$`)

// describeMemory prints a channel's memory settings, and each user's
// own, with where each value came from.
func describeMemory(w io.Writer, p Policy) {
	line := func(prefix string, m Memory) {
		fmt.Fprintf(w, "  %smemory.enabled\t%t\t%s\n", prefix, m.Enabled.V, m.Enabled.From)
		if !m.Enabled.V && prefix == "" && len(p.UserMemory) == 0 {
			return
		}
		fmt.Fprintf(w, "  %smemory.inject_tokens\t%d\t%s\n", prefix, m.InjectTokens.V, m.InjectTokens.From)
		fmt.Fprintf(w, "  %smemory.max_notes\t%d\t%s\n", prefix, m.MaxNotes.V, m.MaxNotes.From)
		fmt.Fprintf(w, "  %smemory.extract_on_reset\t%t\t%s\n", prefix, m.ExtractOnReset.V, m.ExtractOnReset.From)
		fmt.Fprintf(w, "  %smemory.approve\t%s\t%s\n", prefix, m.Approve.V, m.Approve.From)
	}
	line("", p.Memory)
	users := make([]string, 0, len(p.UserMemory))
	for u := range p.UserMemory {
		users = append(users, u)
	}
	sort.Strings(users)
	for _, u := range users {
		line("user "+u+" ", p.UserMemory[u])
	}
}

// MemoryOn reports whether session.memory.enabled is on for any channel
// or user.
func (c *Config) MemoryOn() bool {
	for _, p := range c.Policies() {
		if p.Memory.Enabled.V {
			return true
		}
		for _, m := range p.UserMemory {
			if m.Enabled.V {
				return true
			}
		}
	}
	return false
}

// ServesMemoryTools reports whether the gateway serves its own memory
// tools: unless a configured server has their name.
func (c *Config) ServesMemoryTools() bool {
	for _, s := range c.Agent.Tools.Servers {
		if s.Name == MemoryToolServer {
			return false
		}
	}
	return true
}
