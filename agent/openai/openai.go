// Package openai is the agent backend for any server that speaks
// OpenAI's chat-completions API (and, for voice, its
// /audio/transcriptions endpoint), on the official Go SDK. It implements
// the agent package's port; nothing else of the gateway imports the SDK.
package openai

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/chatgate/chatgate/agent"
)

// Config configures the OpenAI backend.
type Config struct {
	Name                 string // recorded on conversations; default "openai"
	BaseURL              string // e.g. https://api.sdk.com/v1, or a local server's /v1
	APIKey               string
	Model                string
	Timeout              time.Duration // per request, including a streamed body
	MaxRetries           int           // on 429/5xx and connection errors, with backoff
	Stream               bool
	PricePer1KPrompt     float64
	PricePer1KCompletion float64
	HTTPClient           *http.Client // nil: the library's default
	// Vision sends a user message's images to the model as image parts
	// (data: URLs); without it the model gets the text only.
	Vision bool
	// TranscriptionModel is the model of the server's
	// /audio/transcriptions endpoint (whisper-1, gpt-4o-mini-transcribe,
	// …): voice notes and audio are transcribed with it
	// (Backend.Transcribe).
	// Empty: the backend does not transcribe.
	TranscriptionModel string
}

// Backend talks to any server that speaks the chat-completions API.
type Backend struct {
	cfg    Config
	client sdk.Client
}

// New returns the backend. It makes no request.
func New(cfg Config) *Backend {
	if cfg.Name == "" {
		cfg.Name = "openai"
	}
	opts := []option.RequestOption{
		option.WithBaseURL(cfg.BaseURL),
		option.WithAPIKey(cfg.APIKey),
		option.WithMaxRetries(cfg.MaxRetries),
	}
	if cfg.Timeout > 0 {
		opts = append(opts, option.WithRequestTimeout(cfg.Timeout))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	return &Backend{cfg: cfg, client: sdk.NewClient(opts...)}
}

// Config is the configuration the backend was made with.
func (o *Backend) Config() Config { return o.cfg }

// Name implements Agent.
func (o *Backend) Name() string { return o.cfg.Name }

// Model implements Agent.
func (o *Backend) Model() string { return o.cfg.Model }

// ReadsImages implements ImageReader: true with Vision.
func (o *Backend) ReadsImages() bool { return o.cfg.Vision }

// agent.Reply implements Agent.
func (o *Backend) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	spec := agent.ModelSpec{ID: o.cfg.Model, PricePer1KPrompt: o.cfg.PricePer1KPrompt, PricePer1KCompletion: o.cfg.PricePer1KCompletion}
	if req.Model != nil {
		spec = *req.Model
	}
	params := sdk.ChatCompletionNewParams{
		Model:    spec.ID,
		Messages: toParams(req, o.cfg.Vision),
		Tools:    toolParams(req.Tools),
	}
	if req.NoMoreTools && len(req.Tools) > 0 {
		// The tools stay listed: the turn's messages call them.
		params.ToolChoice.OfAuto = sdk.String(string(sdk.ChatCompletionToolChoiceOptionAutoNone))
	}
	var (
		text  string
		usage sdk.CompletionUsage
		model string
		calls []agent.ToolCall
	)
	if o.cfg.Stream && !req.Unstreamed {
		params.StreamOptions = sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)}
		// accepted: the server answered the request with a stream, so it
		// read the prompt (and bills it) even when no chunk comes.
		var accepted atomic.Bool
		stream := o.client.Chat.Completions.NewStreaming(ctx, params, option.WithMiddleware(
			func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
				resp, err := next(r)
				if err == nil && resp.StatusCode/100 == 2 {
					accepted.Store(true)
				}
				return resp, err
			}))
		defer stream.Close()
		var acc sdk.ChatCompletionAccumulator
		var partial strings.Builder
		for stream.Next() {
			chunk := stream.Current()
			acc.AddChunk(chunk)
			if len(chunk.Choices) > 0 && chunk.Choices[0].Delta.Content != "" {
				partial.WriteString(chunk.Choices[0].Delta.Content)
				if onDelta != nil {
					onDelta(chunk.Choices[0].Delta.Content)
				}
			}
		}
		if err := stream.Err(); err != nil {
			// Stopped or cut before the usage chunk: what the call spent
			// is estimated, so that a stopped answer is not free.
			r := agent.Reply{Messages: partialMessages(partial.String()), Model: cmp.Or(spec.Name, spec.ID)}
			if accepted.Load() {
				r.Usage, r.Cost = estimateSpend(req, &acc, partial.Len(), spec)
			}
			return r, o.wrap(err)
		}
		if len(acc.Choices) == 0 {
			return agent.Reply{}, fmt.Errorf("openai: %s returned no choices", o.cfg.BaseURL)
		}
		text, usage, model = acc.Choices[0].Message.Content, acc.Usage, acc.Model
		calls = toolCalls(acc.Choices[0].Message)
	} else {
		resp, err := o.client.Chat.Completions.New(ctx, params)
		if err != nil {
			return agent.Reply{}, o.wrap(err)
		}
		if len(resp.Choices) == 0 {
			return agent.Reply{}, fmt.Errorf("openai: %s returned no choices", o.cfg.BaseURL)
		}
		text, usage, model = resp.Choices[0].Message.Content, resp.Usage, resp.Model
		calls = toolCalls(resp.Choices[0].Message)
		if onDelta != nil && text != "" {
			onDelta(text)
		}
	}
	total := usage.TotalTokens
	if total == 0 {
		total = usage.PromptTokens + usage.CompletionTokens
	}
	return agent.Reply{
		Messages: []agent.Message{{Role: agent.RoleAssistant, Content: text, ToolCalls: calls}},
		Usage:    agent.Usage{PromptTokens: usage.PromptTokens, CompletionTokens: usage.CompletionTokens, TotalTokens: total},
		Cost:     float64(usage.PromptTokens)/1000*spec.PricePer1KPrompt + float64(usage.CompletionTokens)/1000*spec.PricePer1KCompletion,
		Model:    cmp.Or(spec.Name, spec.ID),
		APIModel: model,
	}, nil
}

// estimateSpend is the estimated spend of a streamed call cut short
// after the server accepted it: the request's prompt (agent.EstimatePrompt)
// and, as completion, the text and tool calls streamed so far
// (textBytes of text; acc holds the calls), at spec's prices.
func estimateSpend(req agent.Request, acc *sdk.ChatCompletionAccumulator, textBytes int, spec agent.ModelSpec) (agent.Usage, float64) {
	u := agent.Usage{PromptTokens: agent.EstimatePrompt(req), Estimated: true}
	n := textBytes
	if len(acc.Choices) > 0 {
		for _, tc := range acc.Choices[0].Message.ToolCalls {
			n += len(tc.ID) + len(tc.Function.Name) + len(tc.Function.Arguments)
		}
	}
	if n > 0 {
		u.CompletionTokens = int64(agent.EstimateTokens(n))
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u, float64(u.PromptTokens)/1000*spec.PricePer1KPrompt + float64(u.CompletionTokens)/1000*spec.PricePer1KCompletion
}

func partialMessages(text string) []agent.Message {
	if text == "" {
		return nil
	}
	return []agent.Message{{Role: agent.RoleAssistant, Content: text}}
}

func toolCalls(m sdk.ChatCompletionMessage) []agent.ToolCall {
	var out []agent.ToolCall
	for _, tc := range m.ToolCalls {
		if tc.Function.Name != "" {
			out = append(out, agent.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
	}
	return out
}

func (o *Backend) wrap(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		msg := apiErr.Message
		if msg == "" {
			msg = http.StatusText(apiErr.StatusCode)
		}
		return &agent.Error{Status: apiErr.StatusCode, Err: errors.New(msg)}
	}
	return &agent.Error{Err: err}
}

func toParams(req agent.Request, vision bool) []sdk.ChatCompletionMessageParamUnion {
	out := make([]sdk.ChatCompletionMessageParamUnion, 0, len(req.History)+len(req.Earlier)+len(req.Turn)+2)
	if req.Instructions != "" {
		out = append(out, sdk.SystemMessage(req.Instructions))
	}
	out = appendMessages(out, req.History, vision)
	if mem := req.MemoryText(); mem != "" {
		out = append(out, sdk.SystemMessage(mem))
	}
	for _, in := range req.InputMessages() {
		out = append(out, userParam(in, vision))
	}
	// The turn's rounds so far come after the inputs they answer.
	return appendMessages(out, req.Turn, vision)
}

// appendMessages appends msgs (appendParam). With vision, the pictures
// tool calls returned follow their results: a tool message carries text
// only, so after the last result of a round comes a user message with
// the round's pictures (agent.ToolImagesText, then each image).
func appendMessages(out []sdk.ChatCompletionMessageParamUnion, msgs []agent.Message, vision bool) []sdk.ChatCompletionMessageParamUnion {
	var pics []agent.Attachment
	for i, m := range msgs {
		out = appendParam(out, m, vision)
		if !vision || m.Role != agent.RoleTool {
			continue
		}
		for _, a := range m.Attachments {
			if a.Kind == agent.KindImage {
				pics = append(pics, a)
			}
		}
		if len(pics) > 0 && (i+1 == len(msgs) || msgs[i+1].Role != agent.RoleTool) {
			out = append(out, userParam(agent.Message{Role: agent.RoleUser, Content: agent.ToolImagesText, Attachments: pics}, true))
			pics = nil
		}
	}
	return out
}

// appendParam appends one message of the history or of the turn; a
// message of an unknown role is left out.
func appendParam(out []sdk.ChatCompletionMessageParamUnion, m agent.Message, vision bool) []sdk.ChatCompletionMessageParamUnion {
	switch m.Role {
	case agent.RoleUser:
		return append(out, userParam(m, vision))
	case agent.RoleTool:
		return append(out, sdk.ToolMessage(m.Content, m.ToolCallID))
	case agent.RoleSystem:
		return append(out, sdk.SystemMessage(m.Content))
	case agent.RoleAssistant:
		return append(out, assistantParam(m))
	}
	return out
}

// assistantParam is an assistant message: its text, or its tool calls
// (and the text that came with them, if any).
func assistantParam(m agent.Message) sdk.ChatCompletionMessageParamUnion {
	if len(m.ToolCalls) == 0 {
		return sdk.AssistantMessage(m.Content)
	}
	a := sdk.ChatCompletionAssistantMessageParam{}
	if m.Content != "" {
		a.Content.OfString = sdk.String(m.Content)
	}
	for _, tc := range m.ToolCalls {
		a.ToolCalls = append(a.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{
			OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
				ID:       tc.ID,
				Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: tc.Arguments},
			},
		})
	}
	return sdk.ChatCompletionMessageParamUnion{OfAssistant: &a}
}

// toolParams are the tools offered as function tools; none gives nil, so
// that the request has no tools key at all.
func toolParams(tools []agent.Tool) []sdk.ChatCompletionToolUnionParam {
	if len(tools) == 0 {
		return nil
	}
	out := make([]sdk.ChatCompletionToolUnionParam, 0, len(tools))
	for _, t := range tools {
		def := sdk.FunctionDefinitionParam{Name: t.Name, Parameters: sdk.FunctionParameters(t.Parameters)}
		if t.Description != "" {
			def.Description = sdk.String(t.Description)
		}
		out = append(out, sdk.ChatCompletionFunctionTool(def))
	}
	return out
}

// userParam is a user message: its text alone, or, with vision and
// images, an array of content parts — the text, then each image (or, for
// one that could not be fetched, a text saying so). Attachments other
// than images are in the text already.
func userParam(m agent.Message, vision bool) sdk.ChatCompletionMessageParamUnion {
	var images []agent.Attachment
	for _, a := range m.Attachments {
		if a.Kind == agent.KindImage {
			images = append(images, a)
		}
	}
	if !vision && len(images) > 0 && strings.TrimSpace(m.Content) == "" {
		// A picture alone, to a model without vision: it is told, rather
		// than given an empty message.
		return sdk.UserMessage(agent.UnseenImageText)
	}
	if !vision || len(images) == 0 {
		return sdk.UserMessage(m.Content)
	}
	parts := make([]sdk.ChatCompletionContentPartUnionParam, 0, len(images)+1)
	if m.Content != "" {
		parts = append(parts, sdk.TextContentPart(m.Content))
	}
	for _, a := range images {
		if a.Missing || len(a.Data) == 0 {
			parts = append(parts, sdk.TextContentPart(agent.MissingImageText))
			continue
		}
		parts = append(parts, sdk.ImageContentPart(sdk.ChatCompletionContentPartImageImageURLParam{URL: a.DataURL()}))
	}
	return sdk.UserMessage(parts)
}
