package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions"
)

func TestTranscriptsNameAttachments(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "g.db")
	path := writeConfig(t, fmt.Sprintf("storage:\n  dsn: %s\n", dbPath))
	out := storeTurn(t, dbPath, sessions.Inbound{Channel: "telegram", SessionKey: "telegram:dm:7", Text: "look",
		Attachments: []agent.Attachment{{Kind: agent.KindImage, Type: "photo", Mime: "image/jpeg", FileID: "AgAD", Size: 48213}}})
	code, shown, _ := runCmd(t, "sessions", "show", "-c", path, "telegram:dm:7")
	if code != 0 || !strings.Contains(shown, "look [photo image/jpeg 48213 bytes]") ||
		!strings.Contains(shown, "echo: look "+agent.MissingImageText+" (history: 0)") {
		t.Fatalf("show (%d):\n%s", code, shown)
	}
	code, exported, _ := runCmd(t, "sessions", "export", "-c", path, out.ConversationID)
	var doc struct {
		Messages []struct {
			Attachments []agent.Attachment
		}
	}
	if err := json.Unmarshal([]byte(exported), &doc); code != 0 || err != nil || len(doc.Messages[0].Attachments) != 1 ||
		doc.Messages[0].Attachments[0].FileID != "AgAD" {
		t.Fatalf("export (%d, %v):\n%s", code, err, exported)
	}
}
