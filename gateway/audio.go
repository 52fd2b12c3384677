package gateway

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions"
)

// Audio a client sends on a message frame (kind "audio"). With a
// transcriber (agent.openai.transcription_model), the connection's worker
// transcribes it, in arrival order, before the message is stored: the
// transcripts are the message's text, the frame's own text after them,
// and the attachment's metadata is stored with it — its bytes are never
// kept. The message is then answered as a typed one.
//
// Without a transcriber an audio attachment is refused (unsupported) and
// nothing is stored. Audio of a type the transcription endpoint does not
// take, whose bytes are not of the type declared, or over max_audio_bytes
// is a bad_frame. A transcription that fails or hears nothing is refused
// with transcription_failed: nothing is stored, and the client may send
// the message again.
//
// A transcription is a model call the user causes, so a user over their
// budget (session.limits) causes none: the message is refused with
// over_budget, whose text is sessions.BudgetAudioText (which limit, and
// when it frees up), and nothing is stored. A usage read that fails lets
// the transcription go on, as a turn's budget check does.

// sniffedAudio maps what http.DetectContentType tells of audio to the
// declared types it allows. Audio it cannot tell (application/octet-stream:
// an MP3 without an ID3 tag, an M4A, …) is taken as declared.
var sniffedAudio = map[string][]string{
	"application/ogg": {"audio/ogg"},
	"audio/wave":      {"audio/wav", "audio/x-wav", "audio/wave"},
	"audio/mpeg":      {"audio/mpeg", "audio/mp3"},
	"video/mp4":       {"audio/mp4", "audio/m4a", "audio/x-m4a"},
	"video/webm":      {"audio/webm"},
}

// audioMimeList names the accepted audio types, for error messages.
var audioMimeList = strings.Join(slices.Sorted(maps.Keys(agent.AudioMimes)), ", ")

// checkAudio validates and decodes attachment i, an audio one. Its type
// is taken without parameters ("audio/webm;codecs=opus" is audio/webm).
func checkAudio(i int, a *frameAttachment) *wsError {
	a.Mime = strings.ToLower(strings.TrimSpace(strings.Split(a.Mime, ";")[0]))
	if _, ok := agent.AudioMimes[a.Mime]; !ok {
		return errBadFrame.with("attachment %d: audio mime must be one of %s, got %q", i+1, audioMimeList, a.Mime)
	}
	if len(a.Name) > 255 {
		return errBadFrame.with("attachment %d: name is over 255 bytes", i+1)
	}
	data, werr := decodeData(i, a)
	if werr != nil {
		return werr
	}
	got := strings.Split(http.DetectContentType(data), ";")[0]
	flac := a.Mime == "audio/flac" || a.Mime == "audio/x-flac"
	if (got != "application/octet-stream" && !slices.Contains(sniffedAudio[got], a.Mime)) || (flac && !bytes.HasPrefix(data, []byte("fLaC"))) {
		return errBadFrame.with("attachment %d: data is not %s (it looks like %s)", i+1, a.Mime, got)
	}
	a.bytes = data
	return nil
}

// admitAudio refuses a message frame's audio before the frame is queued:
// without a transcriber, or over max_audio_bytes.
func (ws *WebSocket) admitAudio(f *clientFrame) *wsError {
	for i, a := range f.Attachments {
		switch {
		case a.Kind != agent.KindAudio:
		case ws.opts.Transcriber == nil:
			return errUnsupported
		case int64(len(a.bytes)) > ws.opts.MaxAudioBytes:
			return errBadFrame.with("attachment %d: audio is %d bytes, over this gateway's limit of %d", i+1, len(a.bytes), ws.opts.MaxAudioBytes)
		}
	}
	return nil
}

// hasAudio reports whether a message frame carries audio.
func hasAudio(f *clientFrame) bool {
	return slices.ContainsFunc(f.Attachments, func(a frameAttachment) bool { return a.Kind == agent.KindAudio })
}

// transcribe is the text of a message frame with audio from in's user:
// each audio attachment's transcript, in order, then the frame's text.
// Nothing is transcribed for a user over their budget.
func (ws *WebSocket) transcribe(ctx context.Context, in sessions.Inbound, f *clientFrame) (string, *wsError) {
	if werr := ws.overBudget(ctx, in); werr != nil {
		return "", werr
	}
	var parts []string
	for _, a := range f.Attachments {
		if a.Kind != agent.KindAudio {
			continue
		}
		tctx, end := ws.traceTranscribe(ctx, int64(len(a.bytes)), a.Mime)
		name := a.Name
		if name == "" {
			name = "audio"
		}
		text, err := ws.opts.Transcriber.Transcribe(tctx, bytes.NewReader(a.bytes), agent.AudioFileName(name, a.Mime), a.Mime)
		end(err)
		if err != nil {
			ws.log.Warn("websocket: transcribing audio failed", slog.String("error", err.Error()))
			return "", errTranscribe
		}
		if text = strings.TrimSpace(text); text == "" {
			return "", errTranscribe.with("no speech was heard in the audio; send it again or type it")
		}
		parts = append(parts, text)
	}
	if f.Text != nil && strings.TrimSpace(*f.Text) != "" {
		parts = append(parts, *f.Text)
	}
	return strings.Join(parts, "\n\n"), nil
}

// overBudget refuses audio from in's user while they are over their
// budget; nil when it may be transcribed. A usage read that fails is
// logged and lets it be.
func (ws *WebSocket) overBudget(ctx context.Context, in sessions.Inbound) *wsError {
	s, err := ws.sess.Usage(ctx, in.Channel, in.SessionKey)
	if err != nil {
		ws.log.Warn("websocket: reading the user's usage failed; the audio is transcribed without its budget check",
			slog.String("session_key", in.SessionKey), slog.String("error", err.Error()))
		return nil
	}
	if s.Over() == "" {
		return nil
	}
	return errOverBudget.with("%s", sessions.BudgetAudioText(s, ws.opts.Now(), "audio message"))
}
