package telegram

// Tests of the commands and their answers.

import (
	"strings"
	"testing"

	"github.com/chatgate/chatgate/internal/telegramtest"
)

func TestNewCommandAndHelp(t *testing.T) {
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), setup{})
	api.Push(telegramtest.DM(7, "one"))
	api.WaitSent(t, 1)
	api.Push(telegramtest.DM(7, "/new"))
	if got := api.WaitSent(t, 2)[1].Text; got != resetText {
		t.Fatalf("/new answer = %q", got)
	}
	api.Push(telegramtest.DM(7, "two"))
	if got := api.WaitSent(t, 3)[2].Text; got != "echo: two (history: 0)" {
		t.Fatalf("after /new = %q", got)
	}
	api.Push(telegramtest.DM(7, "/frobnicate"))
	if got := api.WaitSent(t, 4)[3].Text; got != helpText {
		t.Fatalf("unknown command answer = %q", got)
	}
	api.Push(telegramtest.DM(7, "/start"))
	if got := api.WaitSent(t, 5)[4].Text; !strings.HasPrefix(got, "Hello!") {
		t.Fatalf("/start answer = %q", got)
	}
}
