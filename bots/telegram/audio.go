package telegram

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions"
)

// Voice. With a transcriber (agent.openai.transcription_model), a voice
// note or an audio file is downloaded (getFile, then the file download,
// as documents are) and transcribed before its message is stored: the
// transcript is the message's text, its caption after it, and the
// attachment's metadata is stored with it (never its bytes). The message
// is then answered as a typed one, and the reply shows the transcript
// quoted above the answer, so the user sees what was heard; the stored
// reply is the model's alone.
//
// Audio that cannot be transcribed — over max_audio_bytes, a failed
// download or transcription, or nothing heard in it — gets a reply saying
// so and nothing is stored, its caption neither: the speech was the
// message. Audio of a type the transcription endpoint does not take is
// told so, and its caption answered, as an unreadable file is. Without a
// transcriber, voice and audio get the reply of unsupportedTexts.
//
// A transcription is a model call the user causes, so a user over their
// budget (session.limits) causes none: their audio is neither downloaded
// nor transcribed, and they get sessions.BudgetAudioText — which limit,
// and when it frees up — and nothing is stored, as for audio that could
// not be heard. A usage read that fails lets the transcription go on, as
// a turn's budget check does.

// DefaultMaxAudioBytes is Options.MaxAudioBytes' default.
const DefaultMaxAudioBytes = agent.DefaultMaxAudioBytes

// maxQuoteRunes bounds the transcript quoted above a reply: a long voice
// note shows its beginning, and the whole of it is in the message stored.
const maxQuoteRunes = 1000

// Texts about audio that was not transcribed; %s is the audio's noun.
const (
	audioFailedText = "I couldn't make out that %s; please try again or type it."
	audioTooBigText = "That %s is too long for me to listen to (over %s); please send a shorter one or type it."
	audioTypeText   = "I can't listen to this kind of audio (%s); please send it as mp3, m4a, ogg, wav or flac, or type it."
)

// audioNouns name what the user sent, by the update's field.
var audioNouns = map[string]string{"voice": "voice message", "audio": "audio file"}

// audio reads a voice note (kind "voice") or an audio file ("audio") of
// session key's user.
func (b *Bot) audio(ctx context.Context, in *inbound, key, kind string, a agent.Attachment) {
	if b.opts.Transcriber == nil {
		b.unsupported(in, kind, a)
		return
	}
	noun := audioNouns[kind]
	mime := strings.ToLower(strings.TrimSpace(strings.Split(a.Mime, ";")[0]))
	if mime == "" && kind == "voice" {
		mime = "audio/ogg" // a voice note is OGG/Opus
	}
	if _, ok := agent.AudioMimes[mime]; !ok {
		shown := mime
		if shown == "" {
			shown = "unknown type"
		}
		in.notices = append(in.notices, fmt.Sprintf(audioTypeText, shown))
		if strings.TrimSpace(in.text) != "" {
			a.Kind, a.Type = agent.KindOther, kind
			in.atts = append(in.atts, a)
		}
		return
	}
	caption := in.text
	in.text, in.spoken = "", true
	if note := b.overBudget(ctx, key, noun); note != "" {
		in.notices = append(in.notices, note)
		return
	}
	limit := b.opts.MaxAudioBytes
	tooBig := func(size int64) {
		b.audioRefused(ctx, size, limit, mime)
		in.notices = append(in.notices, fmt.Sprintf(audioTooBigText, noun, byteSize(limit)))
	}
	if a.Size > limit {
		tooBig(a.Size)
		return
	}
	data, err := b.download(ctx, a.FileID, limit)
	switch {
	case errors.Is(err, errTooBig):
		tooBig(a.Size)
		return
	case err != nil:
		b.log.Warn("telegram: downloading audio failed", slog.String("kind", kind), slog.String("error", b.redact(err)))
		in.notices = append(in.notices, fmt.Sprintf(audioFailedText, noun))
		return
	}
	name := a.Name
	if name == "" {
		name = kind // voice.ogg
	}
	text, err := b.transcribe(ctx, data, agent.AudioFileName(name, mime), mime)
	if err != nil || text == "" {
		if err != nil {
			b.log.Warn("telegram: transcribing audio failed", slog.String("kind", kind), slog.String("error", b.redact(err)))
		}
		in.notices = append(in.notices, fmt.Sprintf(audioFailedText, noun))
		return
	}
	a.Kind, a.Type, a.Mime, a.Size = agent.KindAudio, kind, mime, int64(len(data))
	in.transcript, in.text = text, text
	if strings.TrimSpace(caption) != "" {
		in.text += "\n\n" + caption
	}
	in.atts = append(in.atts, a)
}

// overBudget is the note for audio (noun) of session key's user when
// they are over their budget, "" when it may be transcribed. A usage read
// that fails is logged and lets it be.
func (b *Bot) overBudget(ctx context.Context, key, noun string) string {
	s, err := b.sess.Usage(ctx, Channel, key)
	if err != nil {
		b.log.Warn("telegram: reading the user's usage failed; the audio is transcribed without its budget check",
			slog.String("session_key", key), slog.String("error", b.redact(err)))
		return ""
	}
	if s.Over() == "" {
		return ""
	}
	return sessions.BudgetAudioText(s, b.opts.Now(), noun)
}

// transcribe turns audio into text, in the span "transcribe".
func (b *Bot) transcribe(ctx context.Context, data []byte, name, mime string) (string, error) {
	ctx, end := b.traceTranscribe(ctx, int64(len(data)), b.opts.MaxAudioBytes, mime)
	text, err := b.opts.Transcriber.Transcribe(ctx, bytes.NewReader(data), name, mime)
	end(err)
	return strings.TrimSpace(text), err
}

// quoteOf is how a reply shows the transcript it answers, above the
// answer: a Markdown quote (a Telegram blockquote) with format html, "> "
// lines with format plain; "" without a transcript. A transcript over
// maxQuoteRunes is cut at a word, with "…".
func (b *Bot) quoteOf(transcript string) string {
	if transcript == "" {
		return ""
	}
	if utf8.RuneCountInString(transcript) > maxQuoteRunes {
		cut := string([]rune(transcript)[:maxQuoteRunes])
		if i := strings.LastIndexAny(cut, " \n"); i > maxQuoteRunes/2 {
			cut = cut[:i]
		}
		transcript = strings.TrimSpace(cut) + " …"
	}
	var q strings.Builder
	for _, line := range strings.Split(transcript, "\n") {
		line = strings.TrimSpace(line)
		if b.opts.Format != FormatPlain {
			line = escapeMarkdown(line)
		}
		q.WriteString(">")
		if line != "" {
			q.WriteString(" " + line)
		}
		q.WriteString("\n")
	}
	return q.String() + "\n"
}

// escapeMarkdown backslash-escapes every ASCII punctuation character, so
// that words spoken are shown as said and never read as markup.
func escapeMarkdown(s string) string {
	var out strings.Builder
	for _, r := range s {
		if r < 0x80 && strings.ContainsRune("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", r) {
			out.WriteByte('\\')
		}
		out.WriteRune(r)
	}
	return out.String()
}
