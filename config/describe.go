package config

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
)

// Describe writes the effective per-channel policies, each value with the
// place it came from, as `gateway check` prints them.
func (c *Config) Describe(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, p := range c.Policies() {
		state := "enabled"
		switch {
		case p.Channel == ChannelWebSocket && !c.WebSocketEnabled():
			state = "disabled"
		case p.Channel == ChannelTelegram && !c.TelegramEnabled():
			state = "disabled: no token"
		}
		fmt.Fprintf(tw, "channel %s (%s)\n", p.Channel, state)
		fmt.Fprintf(tw, "  max_history\t%d\t%s\n", p.MaxHistory.V, p.MaxHistory.From)
		fmt.Fprintf(tw, "  reset.mode\t%s\t%s\n", p.ResetMode.V, p.ResetMode.From)
		if p.Idle() {
			fmt.Fprintf(tw, "  reset.idle_minutes\t%d\t%s\n", p.IdleMinutes.V, p.IdleMinutes.From)
		}
		if p.Daily() {
			fmt.Fprintf(tw, "  reset.at_hour\t%s\t%s\n", strconv.Itoa(p.AtHour.V), p.AtHour.From)
		}
		if p.Idle() || p.Daily() {
			fmt.Fprintf(tw, "  reset.timezone\t%s\t%s\n", p.Timezone.V, p.Timezone.From)
		}
		fmt.Fprintf(tw, "  busy_mode\t%s\t%s\n", p.BusyMode.V, p.BusyMode.From)
		fmt.Fprintf(tw, "  debounce_ms\t%d\t%s\n", p.DebounceMS.V, p.DebounceMS.From)
		fmt.Fprintf(tw, "  debounce_max_ms\t%d\t%s\n", p.DebounceMaxMS.V, p.DebounceMaxMS.From)
		batchFrom := p.MaxBatch.From
		if p.BusyMode.V == BusyQueue {
			batchFrom += "; unused: queue takes one message per turn"
		}
		fmt.Fprintf(tw, "  max_batch\t%d\t%s\n", p.MaxBatch.V, batchFrom)
		if p.Channel == ChannelTelegram && (p.Idle() || p.Daily()) {
			from := "default"
			if c.lines["channels.telegram.notify_resets"] > 0 {
				from = "channels.telegram.notify_resets (" + c.where("channels.telegram.notify_resets") + ")"
			}
			fmt.Fprintf(tw, "  notify_resets\t%t\t%s\n", c.Channels.Telegram.NotifyResets, from)
		}
	}
	tw.Flush()
	for _, warning := range c.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warning)
	}
}
