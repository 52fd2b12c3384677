package agent_test

import (
	"testing"

	"github.com/chatgate/chatgate/agent"
)

func TestAudioFileName(t *testing.T) {
	for _, tt := range []struct{ name, mime, want string }{
		{"", "audio/ogg", "audio.ogg"},
		{"song.mp3", "audio/mpeg", "song.mp3"},
		{"Memo", "audio/x-m4a", "Memo.m4a"},
		{"take.final", "audio/wav", "take.final.wav"},
		{"../../etc/passwd", "audio/flac", "passwd.flac"},
		{"VOICE.OGG", "audio/ogg", "VOICE.OGG"},
		{"x", "audio/unknown", "x"},
	} {
		if got := agent.AudioFileName(tt.name, tt.mime); got != tt.want {
			t.Errorf("AudioFileName(%q, %q) = %q, want %q", tt.name, tt.mime, got, tt.want)
		}
	}
}
