package openai

import (
	"context"
	"io"
	"strings"

	sdk "github.com/openai/openai-go/v3"

	"github.com/chatgate/chatgate/agent"
)

// Transcriber returns o as an agent.Transcriber when it has a transcription
// model (TranscriptionModel), else nil.
func (o *Backend) Transcriber() agent.Transcriber {
	if o.cfg.TranscriptionModel == "" {
		return nil
	}
	return o
}

// Transcribe implements agent.Transcriber with the server's
// /audio/transcriptions endpoint: a multipart upload of the file and the
// model, answered by JSON ({"text": …}). Timeouts and retries are the
// chat calls'.
func (o *Backend) Transcribe(ctx context.Context, audio io.Reader, name, mime string) (string, error) {
	resp, err := o.client.Audio.Transcriptions.New(ctx, sdk.AudioTranscriptionNewParams{
		File:           sdk.File(audio, name, mime),
		Model:          sdk.AudioModel(o.cfg.TranscriptionModel),
		ResponseFormat: sdk.AudioResponseFormatJSON,
	})
	if err != nil {
		return "", o.wrap(err)
	}
	return strings.TrimSpace(resp.Text), nil
}
