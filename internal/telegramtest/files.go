package telegramtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Files, as the Bot API serves them: getFile answers a file_id with a
// file_path (400 "Bad Request: invalid file_id" for one it does not know,
// 400 "Bad Request: file is too big" over 20 MB), and GET
// /file/bot<token>/<file_path> downloads it (404 for anything else).

// MaxDownloadBytes is the Bot API's limit on files a bot may download.
const MaxDownloadBytes = 20 << 20

type file struct {
	path string
	data []byte
}

type files struct {
	byID      map[string]file
	downloads int
}

// AddFile makes a file downloadable under fileID and returns its
// file_path.
func (a *Server) AddFile(fileID string, data []byte) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.files.byID == nil {
		a.files.byID = map[string]file{}
	}
	f := file{path: "files/" + fileID + ".bin", data: data}
	a.files.byID[fileID] = f
	return f.path
}

// RemoveFile makes Telegram forget a file: getFile and its download fail
// from now on, as for a file no longer served.
func (a *Server) RemoveFile(fileID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.files.byID, fileID)
}

// Downloads counts file downloads that were served.
func (a *Server) Downloads() int { a.mu.Lock(); defer a.mu.Unlock(); return a.files.downloads }

func (a *Server) getFile(w http.ResponseWriter, r *http.Request) {
	id := r.FormValue("file_id")
	a.mu.Lock()
	f, ok := a.files.byID[id]
	a.mu.Unlock()
	switch {
	case !ok:
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"ok":false,"error_code":400,"description":"Bad Request: invalid file_id"}`)
	case len(f.data) > MaxDownloadBytes:
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"ok":false,"error_code":400,"description":"Bad Request: file is too big"}`)
	default:
		json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": map[string]any{
			"file_id": id, "file_unique_id": "u" + id, "file_size": len(f.data), "file_path": f.path}})
	}
}

func (a *Server) serveFile(w http.ResponseWriter, r *http.Request) {
	path, ok := strings.CutPrefix(r.URL.Path, "/file/bot"+Token+"/")
	if r.Method != http.MethodGet || !ok {
		http.NotFound(w, r)
		return
	}
	a.mu.Lock()
	var data []byte
	found := false
	for _, f := range a.files.byID {
		if f.path == path {
			data, found = f.data, true
			a.files.downloads++
		}
	}
	a.calls = append(a.calls, Call{Method: "file:" + path})
	a.cond.Broadcast()
	a.mu.Unlock()
	if !found {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(data)
}

// PhotoSize is one size of a photo in an update.
type PhotoSize struct {
	FileID        string
	Width, Height int
	Size          int
}

// Photo is a private-chat photo from user, in the given sizes (smallest
// first, as Telegram sends them), with an optional caption.
func Photo(user int64, caption string, sizes ...PhotoSize) map[string]any {
	m := media(user, caption)
	var ps []map[string]any
	for _, s := range sizes {
		ps = append(ps, map[string]any{"file_id": s.FileID, "file_unique_id": "u" + s.FileID,
			"width": s.Width, "height": s.Height, "file_size": s.Size})
	}
	m["photo"] = ps
	return m
}

// Document is a private-chat file from user with an optional caption.
func Document(user int64, caption, fileID, name, mime string, size int) map[string]any {
	m := media(user, caption)
	m["document"] = map[string]any{"file_id": fileID, "file_unique_id": "u" + fileID,
		"file_name": name, "mime_type": mime, "file_size": size}
	return m
}

// Voice is a private-chat voice note from user with an optional caption.
func Voice(user int64, caption, fileID string) map[string]any {
	return VoiceOf(user, caption, fileID, 1234)
}

// VoiceOf is Voice with the file_size Telegram gives (0: none given, as
// Telegram may leave it out).
func VoiceOf(user int64, caption, fileID string, size int) map[string]any {
	m := media(user, caption)
	v := map[string]any{"file_id": fileID, "file_unique_id": "u" + fileID, "duration": 3, "mime_type": "audio/ogg"}
	if size > 0 {
		v["file_size"] = size
	}
	m["voice"] = v
	return m
}

// Audio is a private-chat audio file (music, a recorded memo) from user
// with an optional caption.
func Audio(user int64, caption, fileID, name, mime string, size int) map[string]any {
	m := media(user, caption)
	m["audio"] = map[string]any{"file_id": fileID, "file_unique_id": "u" + fileID, "duration": 30,
		"file_name": name, "mime_type": mime, "file_size": size}
	return m
}

// media is a private-chat message without text, with caption if given.
func media(user int64, caption string) map[string]any {
	m := DM(user, caption)
	delete(m, "text")
	delete(m, "entities")
	if caption != "" {
		m["caption"] = caption
	}
	return m
}
