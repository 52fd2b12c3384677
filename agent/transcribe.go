package agent

import (
	"context"
	"io"
	"path"
	"strings"
)

// KindAudio is an attachment that was speech: a voice note or an audio
// file, transcribed into its message's text before the message was
// stored. Its bytes are never kept.
const KindAudio = "audio"

// DefaultMaxAudioBytes bounds the audio a channel downloads or accepts
// for transcription (agent.openai.max_audio_bytes' default): the Bot
// API's limit on files a bot downloads.
const DefaultMaxAudioBytes = 20 << 20

// Transcriber turns speech into text. The channels call it on a voice
// note or an audio attachment before storing the message: the transcript
// is the message's text, and the message is answered as a typed one.
type Transcriber interface {
	// Transcribe reads audio, a whole file named name (its extension
	// tells the server the format) of type mime, and returns what was
	// said, trimmed; "" when nothing was.
	Transcribe(ctx context.Context, audio io.Reader, name, mime string) (string, error)
}

// Transcribing is implemented by agents that can also transcribe: their
// Transcriber, or nil when they do not (openai without a transcription
// model).
type Transcribing interface {
	Transcriber() Transcriber
}

// TranscriberOf returns a's transcriber, or nil when a does not
// transcribe (echo, or openai without a transcription model).
func TranscriberOf(a Agent) Transcriber {
	if t, ok := a.(Transcribing); ok {
		return t.Transcriber()
	}
	return nil
}

// AudioMimes are the audio types an OpenAI-compatible transcription
// endpoint takes, with the file extension each is sent under.
var AudioMimes = map[string]string{
	"audio/mpeg":   "mp3",
	"audio/mp3":    "mp3",
	"audio/mp4":    "m4a",
	"audio/m4a":    "m4a",
	"audio/x-m4a":  "m4a",
	"audio/wav":    "wav",
	"audio/x-wav":  "wav",
	"audio/wave":   "wav",
	"audio/webm":   "webm",
	"audio/ogg":    "ogg",
	"audio/flac":   "flac",
	"audio/x-flac": "flac",
}

// audioExts are the file extensions the endpoint recognises.
var audioExts = map[string]bool{"mp3": true, "mp4": true, "mpeg": true, "mpga": true, "m4a": true, "wav": true, "webm": true, "ogg": true, "oga": true, "flac": true}

// AudioFileName is the name audio of type mime is uploaded under: name
// when its extension is one the endpoint knows, else name (or "audio")
// with the extension of mime. The server tells the format by it.
func AudioFileName(name, mime string) string {
	name = path.Base(strings.ReplaceAll(strings.TrimSpace(name), "\\", "/"))
	if name == "." || name == "/" {
		name = ""
	}
	if ext := strings.ToLower(strings.TrimPrefix(path.Ext(name), ".")); audioExts[ext] {
		return name
	}
	if name == "" {
		name = "audio"
	}
	if ext, ok := AudioMimes[mime]; ok {
		return name + "." + ext
	}
	return name
}
