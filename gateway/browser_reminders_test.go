package gateway

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions"
)

// remindersShown is the reminders panel's list as "id:text|id:text".
const remindersShown = `Array.from(document.querySelectorAll('#reminders-list li')).map(li => li.dataset.id + ':' + li.querySelector('.reminder-text').textContent).join('|')`

// The page's Reminders button shows the user's reminders, each with its
// next time and a Cancel button; a cancel refreshes the list, and one
// refused (cancelled meanwhile elsewhere) refreshes it too. A reminder's
// text is shown as text.
func TestWebPageRemindersPanel(t *testing.T) {
	e := reminderEnv(t)
	call := addReminder(t, e, "ada", schedules.Spec{At: time.Date(2026, 3, 29, 18, 0, 0, 0, time.UTC), Timezone: "Europe/Berlin"}, "call <b>Bob</b>")
	stretch := addReminder(t, e, "ada", schedules.Spec{Cron: "0 8 * * 1-5", Timezone: "America/New_York"}, "stretch")
	water := addReminder(t, e, "ada", schedules.Spec{Every: 2 * time.Hour}, "water")
	addReminder(t, e, "bea", schedules.Spec{Every: 3 * time.Hour}, "bea's")
	ctx := browser(t)
	err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/?user=ada"),
		waitText("#status", "online as ada"),
		chromedp.Click("#show-reminders"),
		waitJS(`!document.getElementById('reminders-panel').hidden`),
		waitJS(remindersShown+` === '`+itoa(call)+`:call <b>Bob</b>|`+itoa(stretch)+`:stretch|`+itoa(water)+`:water'`),
		waitJS(`document.querySelectorAll('#reminders-list b').length === 0`),
		waitJS(`document.querySelector('#reminders-list li[data-id="`+itoa(stretch)+`"] .reminder-when').textContent.endsWith(', cron 0 8 * * 1-5')`),
		waitJS(`document.querySelector('#reminders-list li[data-id="`+itoa(water)+`"] .reminder-when').textContent.endsWith(', every 2h')`),
		chromedp.Click(`#reminders-list li[data-id="`+itoa(stretch)+`"] .reminder-cancel`),
		waitJS(remindersShown+` === '`+itoa(call)+`:call <b>Bob</b>|`+itoa(water)+`:water'`),
	)
	if err != nil {
		shown, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('reminders-panel').innerText`))
		t.Fatalf("reminders panel: %v\n%s", err, shown)
	}
	if got, _ := e.mgr.Reminders().List(context.Background(), sessions.WebSocketKey("ada")); len(got) != 2 {
		t.Fatalf("ada's reminders after the cancel: %+v", got)
	}
	// Cancelled elsewhere (another device) while the panel shows it: the
	// page's cancel is refused, and the list as it is now replaces it.
	if err := e.mgr.Reminders().Cancel(context.Background(), sessions.WebSocketKey("ada"), water); err != nil {
		t.Fatal(err)
	}
	err = chromedp.Do(ctx,
		chromedp.Click(`#reminders-list li[data-id="`+itoa(water)+`"] .reminder-cancel`),
		waitJS(remindersShown+` === '`+itoa(call)+`:call <b>Bob</b>'`),
		chromedp.Click(`#reminders-list li[data-id="`+itoa(call)+`"] .reminder-cancel`),
		waitJS(remindersShown+` === ''`),
		waitJS(`!document.getElementById('reminders-empty').hidden && document.getElementById('reminders-empty').textContent.startsWith('No reminders.')`),
		chromedp.Click("#close-reminders"),
		waitJS(`document.getElementById('reminders-panel').hidden`),
	)
	if err != nil {
		shown, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('reminders-panel').innerText`))
		t.Fatalf("reminders panel: %v\n%s", err, shown)
	}
	if got, _ := e.mgr.Reminders().List(context.Background(), sessions.WebSocketKey("bea")); len(got) != 1 {
		t.Fatalf("bea's reminders: %+v", got)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
