package gateway

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// notesShown is the memory panel's list as "id:text|id:text".
const notesShown = `Array.from(document.querySelectorAll('#memory-list li')).map(li => li.dataset.id + ':' + li.querySelector('.note-text').textContent).join('|')`

// markup is a note that would run script, and show bold text, were it
// put in the page as HTML.
const markup = `<img src=x onerror=alert(1)><b>bold</b>`

// The page's Memory button shows the notes kept about the user, newest
// first, with who wrote each; a note added in the panel is kept as the
// user's and shown as the text typed, markup and all, never as HTML. A
// Forget button forgets its note, one forgotten meanwhile elsewhere
// brings the list as it is, and "Forget everything" asks first: "Keep
// them" keeps them, yes forgets every note — the user's only.
func TestWebPageMemoryPanel(t *testing.T) {
	e := memoryEnv(t)
	zephyr := addNote(t, e, "ada", "Ada works on Zephyr", ledger.NoteByModel)
	addNote(t, e, "bea", "bea's note", ledger.NoteByUser)
	ctx := browser(t)
	err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/?user=ada"),
		waitText("#status", "online as ada"),
		// An alert would be the markup run: recorded, not shown.
		chromedp.Evaluate[chromedp.Void](`window.alerted = false; window.alert = () => { window.alerted = true; }`),
		chromedp.Click("#show-memory"),
		waitJS(`!document.getElementById('memory-panel').hidden`),
		waitJS(notesShown+` === '`+itoa(zephyr)+`:Ada works on Zephyr'`),
		waitJS(`document.querySelector('#memory-list .note-meta').textContent.startsWith('by me, ')`),
		chromedp.SendKeys("#memory-text", markup),
		chromedp.Click("#remember"),
		waitJS(`document.querySelectorAll('#memory-list li').length === 2`),
		waitJS(`document.querySelector('#memory-list li .note-text').textContent === `+jsString(markup)),
		waitJS(`document.querySelector('#memory-list li .note-meta').textContent.startsWith('by you, ')`),
		waitJS(`document.getElementById('memory-text').value === ''`),
	)
	if err != nil {
		shown, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('memory-panel').innerText`))
		t.Fatalf("memory panel: %v\n%s", err, shown)
	}
	markupFree(t, ctx)
	notes, err := e.mgr.Memory().List(context.Background(), sessions.WebSocketKey("ada"))
	if err != nil || len(notes) != 2 || notes[0].Text != markup || notes[0].Author != ledger.NoteByUser {
		t.Fatalf("ada's notes after the panel's remember: %+v, %v", notes, err)
	}
	added := notes[0].ID

	// Forget one; then one forgotten elsewhere while the panel shows it:
	// the page's forget is refused, said so, and the list as it is now
	// replaces it.
	third := addNote(t, e, "ada", "Ada has a cat called Pixel", ledger.NoteByOperator)
	err = chromedp.Do(ctx,
		chromedp.Click(`#show-memory`), // closed
		waitJS(`document.getElementById('memory-panel').hidden`),
		chromedp.Click(`#show-memory`), // and opened again: the list as it is now
		waitJS(notesShown+` === '`+itoa(third)+`:Ada has a cat called Pixel|`+itoa(added)+`:'+`+jsString(markup)+`+'|`+itoa(zephyr)+`:Ada works on Zephyr'`),
		chromedp.Click(`#memory-list li[data-id="`+itoa(zephyr)+`"] .note-forget`),
		waitJS(notesShown+` === '`+itoa(third)+`:Ada has a cat called Pixel|`+itoa(added)+`:'+`+jsString(markup)),
	)
	if err != nil {
		shown, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('memory-panel').innerText`))
		t.Fatalf("forget: %v\n%s", err, shown)
	}
	if err := e.mgr.Memory().Forget(context.Background(), sessions.WebSocketKey("ada"), third); err != nil {
		t.Fatal(err)
	}
	err = chromedp.Do(ctx,
		chromedp.Click(`#memory-list li[data-id="`+itoa(third)+`"] .note-forget`),
		waitText("#memory-error", "forgotten already"),
		waitJS(notesShown+` === '`+itoa(added)+`:'+`+jsString(markup)),
	)
	if err != nil {
		shown, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('memory-panel').innerText`))
		t.Fatalf("a forget refused: %v\n%s", err, shown)
	}

	// Forget everything: asked first; "Keep them" keeps them.
	addNote(t, e, "ada", "Ada prefers short answers", ledger.NoteByModel)
	err = chromedp.Do(ctx,
		chromedp.Click(`#show-memory`),
		chromedp.Click(`#show-memory`),
		waitJS(`document.querySelectorAll('#memory-list li').length === 2`),
		chromedp.Click("#forget-all"),
		waitJS(`!document.getElementById('forget-all-confirm').hidden`),
		waitText("#forget-all-question", "Forget all 2 notes kept about you?"),
		chromedp.Click("#forget-all-no"),
		waitJS(`document.getElementById('forget-all-confirm').hidden && !document.getElementById('forget-all').hidden`),
	)
	if err != nil {
		t.Fatalf("forget everything, kept: %v", err)
	}
	if got, _ := e.mgr.Memory().List(context.Background(), sessions.WebSocketKey("ada")); len(got) != 2 {
		t.Fatalf("ada's notes after Keep them: %+v", got)
	}
	err = chromedp.Do(ctx,
		chromedp.Click("#forget-all"),
		chromedp.Click("#forget-all-yes"),
		waitJS(notesShown+` === ''`),
		waitJS(`!document.getElementById('memory-empty').hidden && document.getElementById('memory-empty').textContent.startsWith('No notes.')`),
		waitJS(`document.getElementById('forget-all').disabled && document.getElementById('forget-all-confirm').hidden`),
		chromedp.Click("#close-memory"),
		waitJS(`document.getElementById('memory-panel').hidden`),
	)
	if err != nil {
		shown, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('memory-panel').innerText`))
		t.Fatalf("forget everything: %v\n%s", err, shown)
	}
	if got, _ := e.mgr.Memory().List(context.Background(), sessions.WebSocketKey("ada")); len(got) != 0 {
		t.Fatalf("ada's notes after forgetting everything: %+v", got)
	}
	if got, _ := e.mgr.Memory().List(context.Background(), sessions.WebSocketKey("bea")); len(got) != 1 {
		t.Fatalf("bea's notes: %+v", got)
	}
	markupFree(t, ctx)
}

// markupFree fails the test if a note's markup became elements of the
// page, or ran.
func markupFree(t *testing.T, ctx context.Context) {
	t.Helper()
	got, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelectorAll('img, b').length === 0 && !window.alerted`))
	if err != nil || !got {
		t.Fatalf("a note's markup became page elements, or ran: %v", err)
	}
}
