package llmtest

import (
	"strings"
	"sync"
)

// Script is a scripted model: it decides the answer to each request.
// It may be called from several requests at once.
type Script func(Request) Answer

// Turn are the request's messages after its last user message: the
// current turn's tool rounds so far.
func (r Request) Turn() []Message {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i+1:]
		}
	}
	return r.Messages
}

// Results are the texts of the tool messages at the end of the request:
// the results of the last round of calls, in order.
func (r Request) Results() []string {
	var out []string
	for i := len(r.Messages) - 1; i >= 0 && r.Messages[i].Role == "tool"; i-- {
		out = append([]string{r.Messages[i].Text()}, out...)
	}
	return out
}

// Done is the text a Rounds script answers with once its rounds are
// over: "done: " and the last round's results, joined by "; ".
func Done(results ...string) string { return "done: " + strings.Join(results, "; ") }

// Rounds is a model that, in every turn, asks for the calls of
// rounds[0] (several at once when it holds several), then, once their
// results came back, those of rounds[1], and so on; then answers
// Done(the last round's results…). The calls' ids are made up by the
// server.
func Rounds(rounds ...[]ToolCall) Script {
	return func(req Request) Answer {
		done := 0
		for _, m := range req.Turn() {
			if m.Role == "assistant" && len(m.ToolCalls) > 0 {
				done++
			}
		}
		if done < len(rounds) {
			return Answer{ToolCalls: rounds[done]}
		}
		return Answer{Text: Done(req.Results()...)}
	}
}

// ToolThenAnswer is a model that calls tool name with args once a turn,
// then answers Done(its result).
func ToolThenAnswer(name, args string) Script {
	return Rounds([]ToolCall{{Name: name, Arguments: args}})
}

// AlwaysTool is a model that calls tool name with args on every request
// — until told tool_choice none, when it answers Reply.
func AlwaysTool(name, args string) Script {
	return func(Request) Answer {
		return Answer{ToolCalls: []ToolCall{{Name: name, Arguments: args}}}
	}
}

// Queue is a model that gives answers in order, one a request, then
// Reply.
func Queue(answers ...Answer) Script {
	var mu sync.Mutex
	return func(Request) Answer {
		mu.Lock()
		defer mu.Unlock()
		if len(answers) == 0 {
			return Answer{Text: Reply}
		}
		a := answers[0]
		answers = answers[1:]
		return a
	}
}
