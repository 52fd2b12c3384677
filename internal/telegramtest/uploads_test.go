package telegramtest

import (
	"bytes"
	"image"
	"image/png"
	"strings"
	"testing"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
)

// pngOf is a 1×n PNG.
func pngOf(t *testing.T, n int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, 1, n))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// The upload methods as the client library sends them: multipart, the
// file in the method's field, an album's files named by its media.
func TestUploadsAsTheLibrarySendsThem(t *testing.T) {
	a, api := newClient(t)
	pic, second, pdf := pngOf(t, 1), pngOf(t, 2), []byte("%PDF-1.4 fake")
	photo := tgbotapi.NewPhoto(7, tgbotapi.FileBytes{Name: "chart.png", Bytes: pic})
	photo.ReplyToMessageID = 3
	msg, err := api.Send(photo)
	if err != nil || len(msg.Photo) != 1 || msg.Photo[0].FileSize != len(pic) || msg.Chat.ID != 7 {
		t.Fatalf("sendPhoto: %+v, %v", msg, err)
	}
	msg, err = api.Send(tgbotapi.NewDocument(7, tgbotapi.FileBytes{Name: "report.pdf", Bytes: pdf}))
	if err != nil || msg.Document == nil || msg.Document.FileName != "report.pdf" {
		t.Fatalf("sendDocument: %+v, %v", msg, err)
	}
	msgs, err := api.SendMediaGroup(tgbotapi.NewMediaGroup(7, []any{
		tgbotapi.NewInputMediaPhoto(tgbotapi.FileBytes{Name: "a.png", Bytes: pic}),
		tgbotapi.NewInputMediaPhoto(tgbotapi.FileBytes{Name: "b.png", Bytes: second}),
	}))
	if err != nil || len(msgs) != 2 || msgs[0].MediaGroupID == "" || msgs[0].MediaGroupID != msgs[1].MediaGroupID {
		t.Fatalf("sendMediaGroup: %+v, %v", msgs, err)
	}
	// Telegram mixes no document with a photo in an album.
	_, err = api.SendMediaGroup(tgbotapi.NewMediaGroup(7, []any{
		tgbotapi.NewInputMediaPhoto(tgbotapi.FileBytes{Name: "a.png", Bytes: pic}),
		tgbotapi.NewInputMediaDocument(tgbotapi.FileBytes{Name: "r.pdf", Bytes: pdf}),
	}))
	if err == nil || !strings.Contains(err.Error(), "can't be mixed") {
		t.Fatalf("a photo and a document in one album: %v", err)
	}
	ups := a.Uploads()
	if len(ups) != 4 {
		t.Fatalf("uploads = %d, want 4", len(ups))
	}
	if u := ups[0]; u.Method != "sendPhoto" || u.Kind != "photo" || u.FileName != "chart.png" || !bytes.Equal(u.Data, pic) || u.ReplyTo != 3 {
		t.Fatalf("photo = %+v", u)
	}
	if u := ups[1]; u.Method != "sendDocument" || !bytes.Equal(u.Data, pdf) {
		t.Fatalf("document = %+v", u)
	}
	if u := ups[3]; u.Method != "sendMediaGroup" || u.FileName != "b.png" || !bytes.Equal(u.Data, second) || u.Group == "" {
		t.Fatalf("album item = %+v", u)
	}
	// A photo Telegram cannot read as a picture is refused, and an album
	// with it.
	if _, err := api.Send(tgbotapi.NewPhoto(7, tgbotapi.FileBytes{Name: "x.png", Bytes: []byte("\x89PNG fake")})); err == nil ||
		!strings.Contains(err.Error(), "IMAGE_PROCESS_FAILED") {
		t.Fatalf("a photo that is no picture: %v", err)
	}
	if _, err := api.SendMediaGroup(tgbotapi.NewMediaGroup(7, []any{
		tgbotapi.NewInputMediaPhoto(tgbotapi.FileBytes{Name: "a.png", Bytes: pic}),
		tgbotapi.NewInputMediaPhoto(tgbotapi.FileBytes{Name: "x.png", Bytes: []byte("no picture")}),
	})); err == nil || !strings.Contains(err.Error(), "IMAGE_PROCESS_FAILED") {
		t.Fatalf("an album with a photo that is no picture: %v", err)
	}
	if n := len(a.Uploads()); n != 4 {
		t.Fatalf("uploads after the refusals = %d, want still 4", n)
	}
	// A photo by file id: the real API takes it; this fake, which keeps
	// uploads only, says so rather than pretend.
	if _, err := api.Request(tgbotapi.NewPhoto(7, tgbotapi.FileID("abc"))); err == nil || !strings.Contains(err.Error(), "multipart") {
		t.Fatalf("a photo by file id: %v", err)
	}
}
