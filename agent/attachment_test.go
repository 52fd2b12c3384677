package agent

import "testing"

// Echo names a message's attachments after its text, so that a demo
// shows what reached the agent.
func TestEchoDescribesAttachments(t *testing.T) {
	req := Request{
		History: []Message{{Role: RoleUser, Content: "old", Attachments: []Attachment{{Kind: KindImage, Mime: "image/png", Missing: true}}},
			{Role: RoleAssistant, Content: "ok"}},
		Input:            "new",
		InputAttachments: [][]Attachment{{{Kind: KindImage, Mime: "image/png", Data: []byte("PNG")}, {Kind: KindDocument, Name: "a.txt"}}},
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
