package telegram

// Tests of the webhook: its secret, malformed bodies, and the 503 while
// draining.

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chatgate/chatgate/internal/telegramtest"
)

func TestWebhook(t *testing.T) {
	api := telegramtest.New(t)
	h := start(t, api, t.TempDir(), setup{opts: Options{Mode: "webhook", WebhookURL: "https://bot.example.com/telegram/webhook", WebhookSecret: "s3cret-Value_1"}})
	<-h.done // Start returns after registering the webhook
	hook := api.Webhook()
	if hook["url"] != "https://bot.example.com/telegram/webhook" || hook["secret_token"] != "s3cret-Value_1" {
		t.Fatalf("setWebhook = %v", hook)
	}
	srv := httptest.NewServer(h.bot.WebhookHandler())
	defer srv.Close()
	post := func(secret, body string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		if secret != "" {
			req.Header.Set("X-Telegram-Bot-Api-Secret-Token", secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	update := `{"update_id":41,"message":{"message_id":5,"date":1,"from":{"id":7,"is_bot":false,"first_name":"U"},"chat":{"id":7,"type":"private"},"text":"via webhook"}}`
	if code := post("", update); code != http.StatusUnauthorized {
		t.Fatalf("no secret: %d", code)
	}
	if code := post("wrong", update); code != http.StatusUnauthorized {
		t.Fatalf("wrong secret: %d", code)
	}
	if code := post("s3cret-Value_1", `{"update_id":`); code != http.StatusBadRequest {
		t.Fatalf("malformed body: %d", code)
	}
	if code := post("s3cret-Value_1", update); code != http.StatusOK {
		t.Fatalf("valid update: %d", code)
	}
	if got := api.WaitSent(t, 1)[0]; got.Text != "echo: via webhook (history: 0)" || got.ReplyTo != 5 {
		t.Fatalf("webhook reply = %+v", got)
	}
	h.bot.StopTaking()
	if code := post("s3cret-Value_1", update); code != http.StatusServiceUnavailable {
		t.Fatalf("while draining: %d", code)
	}
}
