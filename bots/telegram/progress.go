package telegram

// Tool calls in the streamed preview: while a turn runs tools, its
// preview (draft or edited message, see stream) shows a line per call above
// the reply so far — "🔧 notes__add…" while it runs, then "✓ 0.2 s",
// "✗ failed", "denied" and the like. The final reply replaces the preview
// and carries no such lines. A tool's name comes from the model: it is
// escaped, never taken as markup.

import (
	"fmt"
	"strings"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/chatgate/chatgate/bots/telegram/tgformat"
	"github.com/chatgate/chatgate/sessions"
)

// maxToolLines is how many calls a preview shows, the latest ones; with
// names cut to askNameRunes they take a small part of a message.
const maxToolLines = 6

// toolLine is a call as the preview shows it.
type toolLine struct {
	id   int64
	line string // plain text
}

// toolLineOf is the preview's line for a call's event.
func toolLineOf(ev sessions.ToolEvent) string {
	name := "🔧 " + cut(ev.Name, askNameRunes)
	switch ev.Status {
	case sessions.ToolAsking:
		return name + " — waiting for approval"
	case sessions.ToolStarted:
		return name + "…"
	case sessions.ToolDone:
		return name + fmt.Sprintf(" ✓ %.1f s", ev.Duration.Seconds())
	case sessions.ToolFailed:
		return name + " ✗ failed"
	case sessions.ToolDenied:
		return name + " — denied"
	case sessions.ToolCancelled:
		return name + " — cancelled"
	case sessions.ToolUnknown:
		return name + " — outcome unknown"
	}
	return name
}

// tool takes a call's event: its line changes, and the preview shows it
// when the pace allows (the worker starts if no delta started it).
func (s *stream) tool(ev sessions.ToolEvent) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	line := toolLineOf(ev)
	found := false
	for i := range s.tools {
		if s.tools[i].id == ev.ID {
			s.tools[i].line, found = line, true
		}
	}
	if !found {
		s.tools = append(s.tools, toolLine{id: ev.ID, line: line})
		if len(s.tools) > maxToolLines {
			s.tools = s.tools[len(s.tools)-maxToolLines:]
		}
	}
	if !s.started {
		s.started = true
		go s.run()
	}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// preview is what the preview shows now, and its parse mode: the tool
// lines, then the reply so far (as previewText makes it, in what room the
// lines leave).
func (s *stream) preview() (string, string) {
	s.mu.Lock()
	soFar := s.quote + s.soFar.String()
	lines := make([]string, len(s.tools))
	for i, l := range s.tools {
		lines[i] = l.line
	}
	s.mu.Unlock()
	if len(lines) == 0 {
		return s.b.previewText(soFar, s.plain)
	}
	block := strings.Join(lines, "\n")
	room := MaxMessageUnits - tgformat.Units(block) - 2
	asHTML := s.b.opts.Format != FormatPlain && !s.plain
	var text string
	if strings.TrimSpace(soFar) != "" {
		if asHTML {
			text = tgformat.Split(soFar, room)[0].HTML
		} else {
			text = partsOfPlain(soFar, room)
		}
	}
	if asHTML {
		block = htmlEscaper.Replace(block)
	}
	if text == "" {
		return block, modeOf(asHTML)
	}
	return block + "\n\n" + text, modeOf(asHTML)
}

// partsOfPlain is the first plain message of text at limit.
func partsOfPlain(text string, limit int) string {
	if parts := Split(text, limit); len(parts) > 0 {
		return parts[0]
	}
	return ""
}

func modeOf(asHTML bool) string {
	if asHTML {
		return tgbotapi.ModeHTML
	}
	return ""
}
