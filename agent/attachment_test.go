package agent

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestUserMessagesCarryImagesOnlyWithVision(t *testing.T) {
	req := Request{
		History: []Message{{Role: RoleUser, Content: "old", Attachments: []Attachment{{Kind: KindImage, Mime: "image/png", Missing: true}}},
			{Role: RoleAssistant, Content: "ok"}},
		Input:            "new",
		InputAttachments: [][]Attachment{{{Kind: KindImage, Mime: "image/png", Data: []byte("PNG")}, {Kind: KindDocument, Name: "a.txt"}}},
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
	alone := Request{Input: "", InputAttachments: [][]Attachment{{{Kind: KindImage, Mime: "image/png"}}}}
	if b, _ := json.Marshal(toParams(alone, false)); !strings.Contains(string(b), UnseenImageText) {
		t.Fatalf("a picture alone without vision: %s", b)
	}
	r, _ := Echo{}.Reply(t.Context(), req, nil)
	if got := r.Text(); got != "echo: new [image image/png, 3 bytes] [document a.txt] (history: 2)" {
		t.Fatalf("echo = %q", got)
	}
	r, _ = Echo{}.Reply(t.Context(), Request{Input: "plain"}, nil)
	if got := r.Text(); got != "echo: plain (history: 0)" {
		t.Fatalf("echo = %q", got)
	}
}
