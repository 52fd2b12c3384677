package telegramtest

// Sending files (sendPhoto, sendDocument, sendAudio, sendMediaGroup) as
// the Bot API takes them: multipart/form-data with the file in the field
// the method names (photo, document, audio), or, for an album, a "media"
// JSON array whose items name their file parts ("attach://<name>"). A
// media group holds 2–10 items; a document goes only with documents and
// an audio only with audios, as Telegram enforces. Each answer is the
// Message sent (an array of them for an album) with its photo sizes,
// document or audio.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	_ "image/jpeg" // photos Telegram reads
	_ "image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Upload is one file the bot sent.
type Upload struct {
	Method    string // sendPhoto, sendDocument, sendAudio or sendMediaGroup
	Kind      string // photo, document or audio
	ChatID    int64
	ReplyTo   int
	Thread    int
	FileName  string // the multipart file name
	Data      []byte
	Caption   string
	MessageID int
	Group     string // the media_group_id of an album's item
}

// Uploads returns the files sent so far, in the order sent.
func (a *Server) Uploads() []Upload {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Upload(nil), a.uploads...)
}

// WaitUploads waits until n files have been sent, bounded.
func (a *Server) WaitUploads(t testing.TB, n int) []Upload {
	t.Helper()
	a.waitFor(t, func() bool { return len(a.uploads) >= n }, func() string {
		return fmt.Sprintf("%d files sent, want %d", len(a.uploads), n)
	})
	return a.Uploads()
}

// Hold makes every request of method wait until the returned release is
// called (or its client goes away, as a killed process's does): a test
// that must act between a bot's request and what follows it.
func (a *Server) Hold(method string) (release func()) {
	ch := make(chan struct{})
	a.mu.Lock()
	if a.holds == nil {
		a.holds = map[string]chan struct{}{}
	}
	a.holds[method] = ch
	a.mu.Unlock()
	once := false
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if !once {
			once = true
			close(ch)
			delete(a.holds, method)
		}
	}
}

// LoseAnswer makes every request of method be carried out — a message
// sent, a file taken — and its answer held until the returned release
// is called; a client that goes away meanwhile (a killed process) never
// gets it. It is the crash between Telegram's taking a request and the
// bot's learning of it.
func (a *Server) LoseAnswer(method string) (release func()) {
	ch := make(chan struct{})
	a.mu.Lock()
	if a.losses == nil {
		a.losses = map[string]chan struct{}{}
	}
	a.losses[method] = ch
	a.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			delete(a.losses, method)
			a.mu.Unlock()
			close(ch)
		})
	}
}

// losing is the channel that releases method's answers, or nil.
func (a *Server) losing(method string) chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.losses[method]
}

// serveLosing carries r out and holds its answer until ch is closed,
// dropping it if r's client goes away first.
func (a *Server) serveLosing(ch chan struct{}, w http.ResponseWriter, r *http.Request) {
	rec := httptest.NewRecorder()
	a.serve(rec, r)
	select {
	case <-ch:
	case <-r.Context().Done():
		return
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

// held waits while method is held; false when r's client went away.
// Called without a.mu.
func (a *Server) held(method string, r *http.Request) bool {
	a.mu.Lock()
	ch := a.holds[method]
	a.mu.Unlock()
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	case <-r.Context().Done():
		return false
	}
}

// isPicture reports whether data reads as a PNG or JPEG, or starts as a
// WebP does.
func isPicture(data []byte) bool {
	if _, _, err := image.DecodeConfig(bytes.NewReader(data)); err == nil {
		return true
	}
	return len(data) > 12 && string(data[:4]) == "RIFF" && string(data[8:12]) == "WEBP"
}

// CutAnswers makes the next n requests of method be carried out — a file
// taken, a message sent — and their connections closed with no answer,
// as a connection reset after Telegram took the request does.
func (a *Server) CutAnswers(method string, n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cuts == nil {
		a.cuts = map[string]int{}
	}
	a.cuts[method] = n
}

// cutting reports whether the answer to this request of method is cut,
// counting it.
func (a *Server) cutting(method string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cuts[method] <= 0 {
		return false
	}
	a.cuts[method]--
	return true
}

// DropRequests makes the next n requests of method have their
// connections closed as soon as their headers arrived, their bodies
// unread: requests the Bot API never had whole (a connection lost while
// a large upload is being written).
func (a *Server) DropRequests(method string, n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.drops == nil {
		a.drops = map[string]int{}
	}
	a.drops[method] = n
}

// dropping reports whether this request of method is dropped, counting
// it.
func (a *Server) dropping(method string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.drops[method] <= 0 {
		return false
	}
	a.drops[method]--
	return true
}

// closeConn closes r's connection with no answer.
func (a *Server) closeConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		a.t.Errorf("telegramtest: close a connection: %v", err)
		return
	}
	conn.Close()
}

// serveCut carries r out and closes its connection with no answer.
func (a *Server) serveCut(w http.ResponseWriter, r *http.Request) {
	a.serve(httptest.NewRecorder(), r)
	a.closeConn(w)
}

// uploadKinds are the upload methods and the field each takes its file in.
var uploadKinds = map[string]string{"sendPhoto": "photo", "sendDocument": "document", "sendAudio": "audio"}

// serveUploads answers the upload methods, and reports whether method
// was one of them.
func (a *Server) serveUploads(method string, w http.ResponseWriter, r *http.Request) bool {
	kind, single := uploadKinds[method]
	if !single && method != "sendMediaGroup" {
		return false
	}
	bad := func(why string) {
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]any{"ok": false, "error_code": 400, "description": "Bad Request: " + why})
	}
	if r.MultipartForm == nil {
		// (The real API also takes a file_id or URL; this fake keeps
		// only uploads, which is all the gateway sends.)
		bad("this fake takes only files uploaded as multipart/form-data")
		return true
	}
	file := func(name string) ([]byte, string, bool) {
		fhs := r.MultipartForm.File[name]
		if len(fhs) != 1 {
			return nil, "", false
		}
		f, err := fhs[0].Open()
		if err != nil {
			return nil, "", false
		}
		defer f.Close()
		data, err := io.ReadAll(f)
		return data, fhs[0].Filename, err == nil
	}
	type item struct {
		kind, name, caption string
		data                []byte
	}
	var items []item
	if single {
		data, name, ok := file(kind)
		if !ok {
			bad("there is no " + kind + " in the request")
			return true
		}
		items = append(items, item{kind, name, r.FormValue("caption"), data})
	} else {
		var media []struct {
			Type    string `json:"type"`
			Media   string `json:"media"`
			Caption string `json:"caption"`
		}
		if err := json.Unmarshal([]byte(r.FormValue("media")), &media); err != nil {
			bad("can't parse media JSON object")
			return true
		}
		if len(media) < 2 || len(media) > 10 {
			bad("media group must have 2-10 items")
			return true
		}
		kinds := map[string]bool{}
		for _, m := range media {
			kinds[m.Type] = true
			ref, ok := strings.CutPrefix(m.Media, "attach://")
			if !ok {
				bad("this fake takes only uploaded files (attach://…)")
				return true
			}
			data, name, ok := file(ref)
			if !ok {
				bad(fmt.Sprintf("file %q must be uploaded in the request", ref))
				return true
			}
			items = append(items, item{m.Type, name, m.Caption, data})
		}
		if (kinds["document"] || kinds["audio"]) && len(kinds) > 1 {
			bad("document and audio can't be mixed with other media types")
			return true
		}
	}
	for _, it := range items {
		// Telegram refuses a photo it cannot read as a picture — the
		// whole album with it.
		if it.kind == "photo" && !isPicture(it.data) {
			bad("IMAGE_PROCESS_FAILED")
			return true
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refusePrivate(w, r) || a.refuseThread(w, r) {
		return true
	}
	chat, _ := strconv.ParseInt(r.FormValue("chat_id"), 10, 64)
	replyTo, _ := strconv.Atoi(r.FormValue("reply_to_message_id"))
	thread := threadOf(r)
	group := ""
	if !single {
		a.albums++
		group = fmt.Sprintf("sent-album-%d", a.albums)
	}
	var msgs []map[string]any
	for _, it := range items {
		id := a.nextMsg
		a.nextMsg++
		a.uploads = append(a.uploads, Upload{Method: method, Kind: it.kind, ChatID: chat, ReplyTo: replyTo, Thread: thread, FileName: it.name,
			Data: it.data, Caption: it.caption, MessageID: id, Group: group})
		m := botMessage(chat, id, thread, "")
		delete(m, "text")
		if it.caption != "" {
			m["caption"] = it.caption
		}
		if group != "" {
			m["media_group_id"] = group
		}
		fileID := fmt.Sprintf("sent-%s-%d", it.kind, id)
		switch it.kind {
		case "photo":
			m["photo"] = []map[string]any{{"file_id": fileID, "file_unique_id": fileID, "width": 2, "height": 2, "file_size": len(it.data)}}
		case "audio":
			m["audio"] = map[string]any{"file_id": fileID, "file_unique_id": fileID, "duration": 0, "file_name": it.name, "file_size": len(it.data)}
		default:
			m["document"] = map[string]any{"file_id": fileID, "file_unique_id": fileID, "file_name": it.name, "file_size": len(it.data)}
		}
		msgs = append(msgs, m)
	}
	a.cond.Broadcast()
	var result any = msgs[0]
	if !single {
		result = msgs
	}
	json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": result})
	return true
}

// parseRequest parses r's form: multipart (uploads) or url-encoded.
func parseRequest(r *http.Request) error {
	if strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/form-data") {
		return r.ParseMultipartForm(64 << 20)
	}
	return r.ParseForm()
}

// cutBody is a request's body that notes whether its reading failed: the
// connection ended before the body did. A body read whole but malformed
// (a multipart form without its closing boundary) reads to io.EOF.
type cutBody struct {
	io.ReadCloser
	cut error
}

func (b *cutBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.cut = err
	}
	return n, err
}
