package gateway

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

func TestDecodeFrame(t *testing.T) {
	tests := []struct {
		in   string
		ok   bool
		typ  string
		code string
	}{
		{`{"type":"hello","user":"ann","session":"s","last_seq":12}`, true, "hello", ""},
		{`{"type":"message","id":"c-1","text":"hi"}`, true, "message", ""},
		{`{"type":"message","text":""}`, true, "message", ""}, // empty text is refused by the manager, with its own message
		{`{"type":"reset"}`, true, "reset", ""},
		{`{"type":"stop"}`, true, "stop", ""},
		{`{"type":"message"}`, false, "", "bad_frame"},
		{`{"type":"hello","last_seq":-1}`, false, "", "bad_frame"},
		{`{"type":"nope"}`, false, "", "bad_frame"},
		{`{}`, false, "", "bad_frame"},
		{`{"type":"stop","x":1}`, false, "", "bad_frame"},
		{"\xff\xfe", false, "", "bad_frame"},
		{`{"type":"stop"} {"type":"stop"}`, false, "", "bad_frame"},
		{`null`, false, "", "bad_frame"},
		{`{"type":"message","id":"a","attachments":[{"kind":"audio","mime":"audio/ogg","data":"T2dnUwACAAA="}]}`, true, "message", ""},
		{`{"type":"message","id":"a","attachments":[{"kind":"audio","mime":"audio/mpeg","data":"//uQxAAA"}]}`, true, "message", ""}, // MP3 without ID3: taken as declared
		{`{"type":"message","id":"a","attachments":[{"kind":"audio","mime":"audio/ogg","data":"aGVsbG8="}]}`, false, "", "bad_frame"},
		{`{"type":"message","id":"a","attachments":[{"kind":"voice","mime":"audio/ogg","data":"T2dnUwACAAA="}]}`, false, "", "bad_frame"},
		{`{"type":"tool_decision","id":7,"allow":true}`, true, "tool_decision", ""},
		{`{"type":"tool_decision","id":7,"allow":false}`, true, "tool_decision", ""},
		{`{"type":"tool_decision","allow":true}`, false, "", "bad_frame"},          // no id
		{`{"type":"tool_decision","id":7}`, false, "", "bad_frame"},                // no allow
		{`{"type":"tool_decision","id":"7","allow":true}`, false, "", "bad_frame"}, // id is a number
		{`{"type":"tool_decision","id":7,"allow":"yes"}`, false, "", "bad_frame"},
		{`{"type":"tool_decision","id":0,"allow":true}`, false, "", "bad_frame"},
		{`{"type":"tool_decision","id":7.5,"allow":true}`, false, "", "bad_frame"},
		{`{"type":"tool_decision","id":7,"allow":true,"x":1}`, false, "", "bad_frame"},
		{`{"type":"tool_decision","id":7,"allow":true} {}`, false, "", "bad_frame"},
		{`{"type":"tool\u005fdecision","id":7,"allow":true}`, false, "", "bad_frame"},              // escaped, with a numeric id: refused, never half read
		{`{"type":"message","id":"c-9","text":"what is \"tool_decision\"?"}`, true, "message", ""}, // the word in a message
		{`{"type":"status"}`, true, "status", ""},
		{`{"type":"model"}`, true, "model", ""},
		{`{"type":"model","name":"Smart"}`, true, "model", ""},
		{`{"type":"model","name":""}`, true, "model", ""}, // back to the default
		{`{"type":"model","name":7}`, false, "", "bad_frame"},
		{`{"type":"model","name":"` + strings.Repeat("x", 129) + `"}`, false, "", "bad_frame"},
		{`{"type":"message","id":"c-1","text":"hi","name":"Smart"}`, false, "", "bad_frame"}, // name is the model frame's
		{`{"type":"memory"}`, true, "memory", ""},
		{`{"type":"remember","text":"I am vegetarian"}`, true, "remember", ""},
		{`{"type":"remember","text":""}`, true, "remember", ""}, // an empty note is refused by Memory, with its own message
		{`{"type":"forget","id":12}`, true, "forget", ""},
		{`{"type":"forget","all":true}`, true, "forget", ""},
		{`{"type":"m\u0065mory"}`, true, "memory", ""}, // escaped, without a numeric field: read as itself
		{`{"type":"memory","id":3}`, false, "", "bad_frame"},
		{`{"type":"memory","text":"x"}`, false, "", "bad_frame"},
		{`{"type":"remember"}`, false, "", "bad_frame"},
		{`{"type":"remember","text":7}`, false, "", "bad_frame"},
		{`{"type":"remember","text":"x","id":3}`, false, "", "bad_frame"},
		{`{"type":"remember","text":"x","user":"eve"}`, false, "", "bad_frame"}, // the user is never the frame's
		{`{"type":"forget"}`, false, "", "bad_frame"},
		{`{"type":"forget","id":"12"}`, false, "", "bad_frame"},
		{`{"type":"forget","id":0}`, false, "", "bad_frame"},
		{`{"type":"forget","id":-4}`, false, "", "bad_frame"},
		{`{"type":"forget","id":1.5}`, false, "", "bad_frame"},
		{`{"type":"forget","all":false}`, false, "", "bad_frame"},
		{`{"type":"forget","all":"yes"}`, false, "", "bad_frame"},
		{`{"type":"forget","id":3,"all":true}`, false, "", "bad_frame"},
		{`{"type":"forget","id":3,"session":"websocket:eve"}`, false, "", "bad_frame"},
		{`{"type":"forget","id":3} {}`, false, "", "bad_frame"},
		{`{"type":"forg\u0065t","id":3}`, false, "", "bad_frame"}, // escaped, with a numeric id: refused, never half read
		{`{"type":"message","id":"c-9","text":"\"forget\" what I said about \"memory\""}`, true, "message", ""},
	}
	for _, tt := range tests {
		f, err := decodeFrame([]byte(tt.in))
		if tt.ok != (err == nil) {
			t.Fatalf("decodeFrame(%q) error = %v, want ok=%v", tt.in, err, tt.ok)
		}
		if err != nil && err.Code != tt.code {
			t.Fatalf("decodeFrame(%q) code = %s, want %s", tt.in, err.Code, tt.code)
		}
		if err == nil && f.Type != tt.typ {
			t.Fatalf("decodeFrame(%q) type = %s", tt.in, f.Type)
		}
		if err == nil && (f.Type == "tool_decision") != (f.Decision != nil) {
			t.Fatalf("decodeFrame(%q): decision %+v", tt.in, f.Decision)
		}
		if err == nil && f.Type == "forget" && (f.NoteID > 0) == f.AllNotes {
			t.Fatalf("decodeFrame(%q): forget id %d, all %v", tt.in, f.NoteID, f.AllNotes)
		}
	}
}

// FuzzDecodeFrame: any input gives a frame or an error frame, never a
// panic; an accepted frame re-encodes to JSON that decodes to the same
// frame.
func FuzzDecodeFrame(f *testing.F) {
	for _, seed := range []string{
		`{"type":"hello","user":"ann","session":"tok","last_seq":3,"conversation":"c"}`,
		`{"type":"message","id":"c-1","text":"hi 👋"}`,
		`{"type":"message","id":"a","attachments":[{"kind":"audio","mime":"audio/ogg","data":"T2dnUwACAAA="}]}`,
		`{"type":"reset"}`, `{"type":"stop"}`, `{"type":"message"}`, `not json`, `{"type":1}`, "",
		`{"type":"tool_decision","id":3,"allow":true}`, `{"type":"tool_decision","id":"3"}`,
		`{"type":"memory"}`, `{"type":"remember","text":"tea, not coffee"}`, `{"type":"forget","id":12}`, `{"type":"forget","all":true}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		frame, werr := decodeFrame(data)
		if (frame == nil) == (werr == nil) {
			t.Fatalf("decodeFrame(%q) = %v, %v: want exactly one", data, frame, werr)
		}
		if werr != nil {
			if werr.Code != "bad_frame" || werr.Message == "" {
				t.Fatalf("error frame %+v", werr)
			}
			return
		}
		var wire any = frame
		if frame.Decision != nil {
			wire = frame.Decision // its id is a number: it is decoded apart
		}
		if frame.Type == "forget" { // so is a forget's
			in := memoryFrameIn{Type: "forget"}
			if frame.AllNotes {
				in.All = &frame.AllNotes
			} else {
				in.ID = json.RawMessage(strconv.FormatInt(frame.NoteID, 10))
			}
			wire = in
		}
		again, werr := decodeFrame(mustJSON(t, wire))
		if werr != nil || again.Type != frame.Type || again.ID != frame.ID {
			t.Fatalf("re-decoding %+v: %+v, %v", frame, again, werr)
		}
		if frame.Decision != nil && (again.Decision == nil || *again.Decision.ID != *frame.Decision.ID || *again.Decision.Allow != *frame.Decision.Allow) {
			t.Fatalf("re-decoding decision %+v: %+v", frame.Decision, again.Decision)
		}
		if again.NoteID != frame.NoteID || again.AllNotes != frame.AllNotes {
			t.Fatalf("re-decoding forget %+v: %+v", frame, again)
		}
	})
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
