package telegram

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
)

// cannotMessage reports whether Telegram refused a send to a user's
// private chat because the bot may not write there: 403 Forbidden, for a
// user who never started the bot ("bot can't initiate conversation with
// a user"), who blocked it ("bot was blocked by the user"), or whose
// account is gone ("user is deactivated"). Sending again will not help
// until the user writes to the bot.
func cannotMessage(err error) bool {
	var apiErr *tgbotapi.Error
	return errors.As(err, &apiErr) && apiErr.Code == http.StatusForbidden
}

// describeFailure makes a failed Bot API answer say what failed when the
// server gave no description: the library's error is only the answer's
// description, so a bare {"ok":false} (or a proxy's error page) would be
// logged as error="". The answer then gets "<method>: HTTP <status> with
// no description", and the status as its error_code if it had none; an
// answer with a description is left as it is.
//
// An answer whose body could not be read whole (cut off, or stalled) is
// its reading's error.
func describeFailure(req *http.Request, resp *http.Response) error {
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s: HTTP %s, its answer not read whole: %w", path.Base(req.URL.Path), resp.Status, err)
	}
	var answer map[string]any
	if json.Unmarshal(body, &answer) != nil || answer == nil {
		answer = map[string]any{"ok": false} // not a Bot API answer
	}
	if d, _ := answer["description"].(string); d != "" {
		return nil
	}
	answer["ok"] = false
	answer["description"] = fmt.Sprintf("%s: HTTP %s with no description", path.Base(req.URL.Path), resp.Status)
	if _, ok := answer["error_code"]; !ok {
		answer["error_code"] = resp.StatusCode
	}
	body, _ = json.Marshal(answer)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Del("Content-Length")
	return nil
}
