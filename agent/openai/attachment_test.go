package openai

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/chatgate/chatgate/agent"
)

func TestUserMessagesCarryImagesOnlyWithVision(t *testing.T) {
	req := agent.Request{
		History: []agent.Message{{Role: agent.RoleUser, Content: "old", Attachments: []agent.Attachment{{Kind: agent.KindImage, Mime: "image/png", Missing: true}}},
			{Role: agent.RoleAssistant, Content: "ok"}},
		Input:            "new",
		InputAttachments: [][]agent.Attachment{{{Kind: agent.KindImage, Mime: "image/png", Data: []byte("PNG")}, {Kind: agent.KindDocument, Name: "a.txt"}}},
	}
	enc := func(vision bool) string {
		b, err := json.Marshal(toParams(req, vision))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	with := enc(true)
	for _, want := range []string{
		`{"content":[{"text":"old","type":"text"},{"text":"[image no longer available]","type":"text"}],"role":"user"}`,
		`{"content":[{"text":"new","type":"text"},{"image_url":{"url":"data:image/png;base64,UE5H"},"type":"image_url"}],"role":"user"}`,
	} {
		if !strings.Contains(with, want) {
			t.Fatalf("with vision:\n%s\nlacks %s", with, want)
		}
	}
	if without := enc(false); strings.Contains(without, "image") || !strings.Contains(without, `{"content":"new","role":"user"}`) {
		t.Fatalf("without vision: %s", without)
	}
	alone := agent.Request{Input: "", InputAttachments: [][]agent.Attachment{{{Kind: agent.KindImage, Mime: "image/png"}}}}
	if b, _ := json.Marshal(toParams(alone, false)); !strings.Contains(string(b), agent.UnseenImageText) {
		t.Fatalf("a picture alone without vision: %s", b)
	}
}
