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
		if p.MaxHistoryTokens.V > 0 || p.MaxHistoryTokens.From != "default" {
			fmt.Fprintf(tw, "  max_history_tokens\t%d\t%s\n", p.MaxHistoryTokens.V, p.MaxHistoryTokens.From)
		}
		fmt.Fprintf(tw, "  compaction.enabled\t%t\t%s\n", p.CompactionEnabled.V, p.CompactionEnabled.From)
		if p.CompactionEnabled.V {
			fmt.Fprintf(tw, "  compaction.keep_last\t%d\t%s\n", p.CompactionKeepLast.V, p.CompactionKeepLast.From)
			prompt := "(built in)"
			if p.CompactionPrompt.V != "" {
				prompt = strconv.Quote(shorten(p.CompactionPrompt.V, 40))
			}
			fmt.Fprintf(tw, "  compaction.prompt\t%s\t%s\n", prompt, p.CompactionPrompt.From)
			model, from := c.Session.Compaction.Model, "session.compaction.model ("+c.where("session.compaction.model")+")"
			if model == "" {
				model, from = "(the agent's)", "default"
			}
			fmt.Fprintf(tw, "  compaction.model\t%s\t%s\n", model, from)
		}
		if p.Channel == ChannelTelegram && (p.Idle() || p.Daily()) {
			from := "default"
			if c.lines["channels.telegram.notify_resets"] > 0 {
				from = "channels.telegram.notify_resets (" + c.where("channels.telegram.notify_resets") + ")"
			}
			fmt.Fprintf(tw, "  notify_resets\t%t\t%s\n", c.Channels.Telegram.NotifyResets, from)
		}
		if p.Channel == ChannelTelegram {
			fmt.Fprintf(tw, "  album_wait_ms\t%d\t%s\n", c.Channels.Telegram.AlbumWaitMS, c.from("channels.telegram.album_wait_ms"))
		}
		if len(c.Agent.Tools.Servers) > 0 || p.ToolServers.From != "all configured (default)" {
			fmt.Fprintf(tw, "  tools\t%s\t%s\n", serverList(p.ToolServers.V), p.ToolServers.From)
		}
		describeBudget(tw, p)
		describeScheduleLimits(tw, p.Schedules)
		describeMemory(tw, p)
	}
	c.describeAgent(tw)
	c.describeModels(tw)
	c.describeTools(tw)
	c.describeSchedules(tw)
	c.describeSecurity(tw)
	tw.Flush()
	for _, warning := range c.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warning)
	}
}

// describeAgent prints what the backend reads besides text — pictures
// and voice — with where each value came from.
func (c *Config) describeAgent(tw io.Writer) {
	o := c.Agent.OpenAI
	fmt.Fprintf(tw, "agent %s\n", c.Agent.Backend)
	if c.Agent.Backend != "openai" {
		state := "off: only the openai backend transcribes"
		if o.TranscriptionModel == "" {
			state = "off"
		}
		fmt.Fprintf(tw, "  transcription_model\t%s\t%s\n", state, c.from("agent.openai.transcription_model"))
		return
	}
	fmt.Fprintf(tw, "  vision\t%t\t%s\n", o.Vision, c.from("agent.openai.vision"))
	model := o.TranscriptionModel
	if model == "" {
		model = "off: voice notes and audio get a reply saying they are not read"
	}
	fmt.Fprintf(tw, "  transcription_model\t%s\t%s\n", model, c.from("agent.openai.transcription_model"))
	if c.Transcribes() {
		fmt.Fprintf(tw, "  max_audio_bytes\t%s\t%s\n", sizeText(int64(o.MaxAudioBytes)), c.from("agent.openai.max_audio_bytes"))
	}
}

// from is where a key's value came from: "default", or the key and its
// file:line.
func (c *Config) from(path string) string {
	if c.lines[path] > 0 {
		return path + " (" + c.where(path) + ")"
	}
	return "default"
}

// sizeText is a size as bot.yaml would write it: "20MiB", "512KiB", or
// bytes.
func sizeText(n int64) string {
	switch {
	case n != 0 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n != 0 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n != 0 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return strconv.FormatInt(n, 10)
}

// describeSecurity prints who may connect, the rate limits, token and
// memory bounds in effect.
func (c *Config) describeSecurity(tw io.Writer) {
	ws := c.Channels.WebSocket
	fmt.Fprintf(tw, "security\n")
	if c.WebSocketEnabled() {
		auth := "development: clients name themselves (hello.user); loopback only"
		switch {
		case len(ws.AuthTokens) > 0:
			auth = fmt.Sprintf("auth_tokens (%d principals)", len(ws.AuthTokens))
		case ws.AllowAnonymous:
			auth = "allow_anonymous: generated guest principals only"
		}
		fmt.Fprintf(tw, "  websocket.auth\t%s\n", auth)
		fmt.Fprintf(tw, "  websocket.resume_ttl\t%s\n", ws.ResumeTTL.D())
		fmt.Fprintf(tw, "  websocket.rate_limit\t%s\n", describeRate(ws.RateLimit, "principal"))
	}
	if c.TelegramEnabled() {
		fmt.Fprintf(tw, "  telegram.rate_limit\t%s\n", describeRate(c.Channels.Telegram.RateLimit, "user"))
	}
	metrics := "open on gateway.listen"
	switch {
	case c.Metrics.Listen != "" && c.Metrics.Token != "":
		metrics = "on " + c.Metrics.Listen + ", bearer token"
	case c.Metrics.Listen != "":
		metrics = "on " + c.Metrics.Listen + " only"
	case c.Metrics.Token != "":
		metrics = "bearer token"
	}
	fmt.Fprintf(tw, "  metrics\t%s\n", metrics)
	fmt.Fprintf(tw, "  session.cache_bytes\t%d\n", int64(c.Session.CacheBytes))
	notice := fmt.Sprintf("%s (default)", c.DelayNotice())
	switch {
	case c.Session.DelayNotice != nil && c.DelayNotice() == 0:
		notice = "off"
	case c.Session.DelayNotice != nil:
		notice = c.DelayNotice().String()
	}
	fmt.Fprintf(tw, "  session.delay_notice\t%s\n", notice)
	retention := "forever"
	if c.Storage.RetentionDays > 0 {
		retention = fmt.Sprintf("%d days", c.Storage.RetentionDays)
	}
	fmt.Fprintf(tw, "  storage.retention_days\t%s\n", retention)
	if c.Storage.Driver == "postgres" {
		fmt.Fprintf(tw, "  storage.timeout\t%s\n", c.Storage.Timeout.D())
	}
}

func describeRate(r RateLimit, per string) string {
	s := fmt.Sprintf("%g/s burst %d per %s", r.PerSecond, r.Burst, per)
	if r.GlobalPerSecond > 0 {
		s += fmt.Sprintf("; channel %g/s burst %d", r.GlobalPerSecond, r.GlobalBurst)
	}
	return s
}

// shorten cuts s to n runes, marking the cut.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
