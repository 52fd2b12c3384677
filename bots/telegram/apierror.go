package telegram

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path"
)

// describeFailure makes a failed Bot API answer say what failed when the
// server gave no description: the library's error is only the answer's
// description, so a bare {"ok":false} (or a proxy's error page) would be
// logged as error="". The answer then gets "<method>: HTTP <status> with
// no description", and the status as its error_code if it had none; an
// answer with a description is left as it is.
func describeFailure(req *http.Request, resp *http.Response) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return // the library meets the same short body and says so
	}
	var answer map[string]any
	if json.Unmarshal(body, &answer) != nil || answer == nil {
		answer = map[string]any{"ok": false} // not a Bot API answer
	}
	if d, _ := answer["description"].(string); d != "" {
		return
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
}
