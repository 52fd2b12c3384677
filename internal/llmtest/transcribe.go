package llmtest

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
)

// The transcription endpoint, POST /v1/audio/transcriptions, as OpenAI
// serves it: a multipart/form-data upload with the fields model, file (the
// audio, with a file name) and optionally response_format, answered by
// JSON {"text": …}. The server checks the form for real: a request whose
// model is not TranscriptionModel, without a file, or asking for another
// response format is refused with a 400 — and so is audio no test gave a
// transcript for (AddAudio), so a test knows the bytes arrived whole.

// TranscriptionModel is the transcription model the server accepts, and
// the one TranscribingAgent configures.
const TranscriptionModel = "whisper-test"

// Transcription is one request the transcription endpoint read.
type Transcription struct {
	Model          string
	ResponseFormat string
	FileName       string
	ContentType    string // the file part's
	Data           []byte
}

type audioState struct {
	transcripts map[string]string // by the audio's bytes
	fail        int
	got         []Transcription
}

// AddAudio makes the server answer audio, byte for byte, with
// transcript.
func (s *Server) AddAudio(audio []byte, transcript string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.audio.transcripts == nil {
		s.audio.transcripts = map[string]string{}
	}
	s.audio.transcripts[string(audio)] = transcript
}

// FailTranscriptions makes every transcription request that reads well
// answer status (0: answer again).
func (s *Server) FailTranscriptions(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.audio.fail = status
}

// Transcriptions are the transcription requests read so far, refused or
// not.
func (s *Server) Transcriptions() []Transcription {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Transcription(nil), s.audio.got...)
}

func apiError(w http.ResponseWriter, status int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	msg, _ := json.Marshal(fmt.Sprintf(format, args...))
	fmt.Fprintf(w, `{"error":{"message":%s,"type":"invalid_request_error"}}`, msg)
}

func (s *Server) transcribe(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		apiError(w, http.StatusMethodNotAllowed, "POST only")
		return
	}
	if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		apiError(w, http.StatusUnauthorized, "no API key")
		return
	}
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		apiError(w, http.StatusBadRequest, "want multipart/form-data, got %q", r.Header.Get("Content-Type"))
		return
	}
	var got Transcription
	hasFile := false
	mr := multipart.NewReader(r.Body, params["boundary"])
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			apiError(w, http.StatusBadRequest, "bad multipart body: %v", err)
			return
		}
		data, err := io.ReadAll(p)
		if err != nil {
			apiError(w, http.StatusBadRequest, "bad multipart part: %v", err)
			return
		}
		switch p.FormName() {
		case "model":
			got.Model = string(data)
		case "response_format":
			got.ResponseFormat = string(data)
		case "file":
			if p.FileName() == "" {
				apiError(w, http.StatusBadRequest, "the file part has no file name")
				return
			}
			hasFile = true
			got.FileName, got.ContentType, got.Data = p.FileName(), p.Header.Get("Content-Type"), data
		}
	}
	s.mu.Lock()
	s.audio.got = append(s.audio.got, got)
	fail := s.audio.fail
	transcript, known := s.audio.transcripts[string(got.Data)]
	s.mu.Unlock()
	switch {
	case got.Model != TranscriptionModel:
		apiError(w, http.StatusBadRequest, "model %q does not exist (want %q)", got.Model, TranscriptionModel)
	case !hasFile || len(got.Data) == 0:
		apiError(w, http.StatusBadRequest, "file is required")
	case got.ResponseFormat != "" && got.ResponseFormat != "json":
		apiError(w, http.StatusBadRequest, "this server answers response_format json only, got %q", got.ResponseFormat)
	case fail != 0:
		apiError(w, fail, "transcription failed on purpose")
	case !known:
		apiError(w, http.StatusBadRequest, "audio of %d bytes that no test gave a transcript for", len(got.Data))
	default:
		text, _ := json.Marshal(transcript)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"text":%s,"usage":{"type":"duration","seconds":3}}`, text)
	}
}
