package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// OpenAIConfig configures the OpenAI backend.
type OpenAIConfig struct {
	Name                 string // recorded on conversations; default "openai"
	BaseURL              string // e.g. https://api.openai.com/v1, or a local server's /v1
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
	// …): voice notes and audio are transcribed with it (transcribe.go).
	// Empty: the backend does not transcribe.
	TranscriptionModel string
}

// OpenAI talks to any server that speaks the chat-completions API.
type OpenAI struct {
	cfg    OpenAIConfig
	client openai.Client
}

// NewOpenAI returns the backend. It makes no request.
func NewOpenAI(cfg OpenAIConfig) *OpenAI {
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
	return &OpenAI{cfg: cfg, client: openai.NewClient(opts...)}
}

// Config is the configuration the backend was made with.
func (o *OpenAI) Config() OpenAIConfig { return o.cfg }

// Name implements Agent.
func (o *OpenAI) Name() string { return o.cfg.Name }

// Model implements Agent.
func (o *OpenAI) Model() string { return o.cfg.Model }

// ReadsImages implements ImageReader: true with Vision.
func (o *OpenAI) ReadsImages() bool { return o.cfg.Vision }

// Reply implements Agent.
func (o *OpenAI) Reply(ctx context.Context, req Request, onDelta func(string)) (Reply, error) {
	spec := ModelSpec{ID: o.cfg.Model, PricePer1KPrompt: o.cfg.PricePer1KPrompt, PricePer1KCompletion: o.cfg.PricePer1KCompletion}
	if req.Model != nil {
		spec = *req.Model
	}
	params := openai.ChatCompletionNewParams{
		Model:    spec.ID,
		Messages: toParams(req, o.cfg.Vision),
		Tools:    toolParams(req.Tools),
	}
	if req.NoMoreTools && len(req.Tools) > 0 {
		// The tools stay listed: the turn's messages call them.
		params.ToolChoice.OfAuto = openai.String(string(openai.ChatCompletionToolChoiceOptionAutoNone))
	}
	var (
		text  string
		usage openai.CompletionUsage
		model string
		calls []ToolCall
	)
	if o.cfg.Stream && !req.Unstreamed {
		params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
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
		var acc openai.ChatCompletionAccumulator
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
			r := Reply{Messages: partialMessages(partial.String()), Model: spec.ID}
			if accepted.Load() {
				r.Usage, r.Cost = estimateSpend(req, &acc, partial.Len(), spec)
			}
			return r, o.wrap(err)
		}
		if len(acc.Choices) == 0 {
			return Reply{}, fmt.Errorf("openai: %s returned no choices", o.cfg.BaseURL)
		}
		text, usage, model = acc.Choices[0].Message.Content, acc.Usage, acc.Model
		calls = toolCalls(acc.Choices[0].Message)
	} else {
		resp, err := o.client.Chat.Completions.New(ctx, params)
		if err != nil {
			return Reply{}, o.wrap(err)
		}
		if len(resp.Choices) == 0 {
			return Reply{}, fmt.Errorf("openai: %s returned no choices", o.cfg.BaseURL)
		}
		text, usage, model = resp.Choices[0].Message.Content, resp.Usage, resp.Model
		calls = toolCalls(resp.Choices[0].Message)
		if onDelta != nil && text != "" {
			onDelta(text)
		}
	}
	if model == "" {
		model = spec.ID
	}
	total := usage.TotalTokens
	if total == 0 {
		total = usage.PromptTokens + usage.CompletionTokens
	}
	return Reply{
		Messages: []Message{{Role: RoleAssistant, Content: text, ToolCalls: calls}},
		Usage:    Usage{PromptTokens: usage.PromptTokens, CompletionTokens: usage.CompletionTokens, TotalTokens: total},
		Cost:     float64(usage.PromptTokens)/1000*spec.PricePer1KPrompt + float64(usage.CompletionTokens)/1000*spec.PricePer1KCompletion,
		Model:    model,
	}, nil
}

// estimateSpend is the estimated spend of a streamed call cut short
// after the server accepted it: the request's prompt (EstimatePrompt)
// and, as completion, the text and tool calls streamed so far
// (textBytes of text; acc holds the calls), at spec's prices.
func estimateSpend(req Request, acc *openai.ChatCompletionAccumulator, textBytes int, spec ModelSpec) (Usage, float64) {
	u := Usage{PromptTokens: EstimatePrompt(req), Estimated: true}
	n := textBytes
	if len(acc.Choices) > 0 {
		for _, tc := range acc.Choices[0].Message.ToolCalls {
			n += len(tc.ID) + len(tc.Function.Name) + len(tc.Function.Arguments)
		}
	}
	if n > 0 {
		u.CompletionTokens = int64(EstimateTokens(n))
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u, float64(u.PromptTokens)/1000*spec.PricePer1KPrompt + float64(u.CompletionTokens)/1000*spec.PricePer1KCompletion
}

func partialMessages(text string) []Message {
	if text == "" {
		return nil
	}
	return []Message{{Role: RoleAssistant, Content: text}}
}

func toolCalls(m openai.ChatCompletionMessage) []ToolCall {
	var out []ToolCall
	for _, tc := range m.ToolCalls {
		if tc.Function.Name != "" {
			out = append(out, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
	}
	return out
}

// Error is a failed call to the model server, with the HTTP status when
// there was an answer. Its message never contains the API key.
type Error struct {
	Status int // 0 when no answer came (connection refused, timeout)
	Err    error
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("model server answered %d: %v", e.Status, e.Err)
	}
	return fmt.Sprintf("model server unreachable: %v", e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

func (o *OpenAI) wrap(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		msg := apiErr.Message
		if msg == "" {
			msg = http.StatusText(apiErr.StatusCode)
		}
		return &Error{Status: apiErr.StatusCode, Err: errors.New(msg)}
	}
	return &Error{Err: err}
}

func toParams(req Request, vision bool) []openai.ChatCompletionMessageParamUnion {
	out := make([]openai.ChatCompletionMessageParamUnion, 0, len(req.History)+len(req.Earlier)+len(req.Turn)+2)
	if req.Instructions != "" {
		out = append(out, openai.SystemMessage(req.Instructions))
	}
	for _, m := range req.History {
		out = appendParam(out, m, vision)
	}
	for _, in := range req.InputMessages() {
		out = append(out, userParam(in, vision))
	}
	// The turn's rounds so far come after the inputs they answer.
	for _, m := range req.Turn {
		out = appendParam(out, m, vision)
	}
	return out
}

// appendParam appends one message of the history or of the turn; a
// message of an unknown role is left out.
func appendParam(out []openai.ChatCompletionMessageParamUnion, m Message, vision bool) []openai.ChatCompletionMessageParamUnion {
	switch m.Role {
	case RoleUser:
		return append(out, userParam(m, vision))
	case RoleTool:
		return append(out, openai.ToolMessage(m.Content, m.ToolCallID))
	case RoleSystem:
		return append(out, openai.SystemMessage(m.Content))
	case RoleAssistant:
		return append(out, assistantParam(m))
	}
	return out
}

// assistantParam is an assistant message: its text, or its tool calls
// (and the text that came with them, if any).
func assistantParam(m Message) openai.ChatCompletionMessageParamUnion {
	if len(m.ToolCalls) == 0 {
		return openai.AssistantMessage(m.Content)
	}
	a := openai.ChatCompletionAssistantMessageParam{}
	if m.Content != "" {
		a.Content.OfString = openai.String(m.Content)
	}
	for _, tc := range m.ToolCalls {
		a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
			OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
				ID:       tc.ID,
				Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: tc.Arguments},
			},
		})
	}
	return openai.ChatCompletionMessageParamUnion{OfAssistant: &a}
}

// toolParams are the tools offered as function tools; none gives nil, so
// that the request has no tools key at all.
func toolParams(tools []Tool) []openai.ChatCompletionToolUnionParam {
	if len(tools) == 0 {
		return nil
	}
	out := make([]openai.ChatCompletionToolUnionParam, 0, len(tools))
	for _, t := range tools {
		def := openai.FunctionDefinitionParam{Name: t.Name, Parameters: openai.FunctionParameters(t.Parameters)}
		if t.Description != "" {
			def.Description = openai.String(t.Description)
		}
		out = append(out, openai.ChatCompletionFunctionTool(def))
	}
	return out
}

// userParam is a user message: its text alone, or, with vision and
// images, an array of content parts — the text, then each image (or, for
// one that could not be fetched, a text saying so). Attachments other
// than images are in the text already.
func userParam(m Message, vision bool) openai.ChatCompletionMessageParamUnion {
	var images []Attachment
	for _, a := range m.Attachments {
		if a.Kind == KindImage {
			images = append(images, a)
		}
	}
	if !vision && len(images) > 0 && strings.TrimSpace(m.Content) == "" {
		// A picture alone, to a model without vision: it is told, rather
		// than given an empty message.
		return openai.UserMessage(UnseenImageText)
	}
	if !vision || len(images) == 0 {
		return openai.UserMessage(m.Content)
	}
	parts := make([]openai.ChatCompletionContentPartUnionParam, 0, len(images)+1)
	if m.Content != "" {
		parts = append(parts, openai.TextContentPart(m.Content))
	}
	for _, a := range images {
		if a.Missing || len(a.Data) == 0 {
			parts = append(parts, openai.TextContentPart(MissingImageText))
			continue
		}
		parts = append(parts, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: a.DataURL()}))
	}
	return openai.UserMessage(parts)
}
