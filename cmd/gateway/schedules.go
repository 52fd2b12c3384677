package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/chatgate/chatgate/config"
	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions"
)

// operatorSchedules are bot.yaml's schedules as the scheduler runs them:
// their times parsed, their targets resolved to session keys. config's
// check has accepted each already; one that still fails is an error
// naming it.
func operatorSchedules(cfg *config.Config) ([]sessions.OperatorSchedule, error) {
	out := make([]sessions.OperatorSchedule, 0, len(cfg.Schedules))
	for _, sc := range cfg.Schedules {
		w, err := schedules.Spec{Cron: sc.Cron, Every: sc.Every.D(), Hours: sc.ActiveHours, Timezone: sc.Timezone}.When()
		if err != nil {
			return nil, fmt.Errorf("schedule %s: %w", sc.Name, err)
		}
		out = append(out, sessions.OperatorSchedule{Name: sc.Name, When: w, Target: scheduleTarget(sc.Target), Prompt: sc.Prompt,
			Misfire: schedules.Misfire{Rule: sc.Misfire, MaxLate: sc.MaxLate.D()}, Quiet: sc.Quiet, TokensPerDay: sc.TokensPerDay})
	}
	return out, nil
}

// scheduleTarget resolves a schedule's target to the conversation it
// names. A Telegram chat with a positive id is that user's private chat;
// a group's (negative id) is the group's own conversation — with
// group_scope user too, where it is nobody's member conversation but the
// group's, which every member sees — in its topic when one is given.
func scheduleTarget(t config.ScheduleTarget) sessions.ScheduleTarget {
	switch {
	case t.AllSessions:
		return sessions.ScheduleTarget{Channel: t.Channel, AllSessions: true}
	case t.Channel == config.ChannelWebSocket:
		return sessions.ScheduleTarget{Channel: t.Channel, SessionKey: sessions.WebSocketKey(t.Principal), UserID: t.Principal}
	}
	var key, user string
	if t.Chat > 0 {
		key, user = sessions.TelegramDMKey(t.Chat), strconv.FormatInt(t.Chat, 10)
	} else {
		key = sessions.TelegramGroupKey(t.Chat, 0, false)
	}
	chat := strconv.FormatInt(t.Chat, 10)
	if t.Topic > 0 {
		key = sessions.TelegramTopicKey(key, t.Topic)
		chat += "/" + strconv.Itoa(t.Topic)
	}
	return sessions.ScheduleTarget{Channel: t.Channel, SessionKey: key, UserID: user, ChatID: chat}
}

// buildScheduler builds the scheduler of the schedules and the users'
// reminders beside the session manager; startScheduler starts it.
func (s *server) buildScheduler() error {
	list, err := operatorSchedules(s.cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", s.cfg.File, err)
	}
	s.scheduler = sessions.NewScheduler(s.mgr, sessions.SchedulerOptions{}, s.log)
	s.scheduler.SetSchedules(list)
	return nil
}

// startScheduler runs the scheduler, once the channels have registered
// their routes (a fire's reply is delivered through them).
func (s *server) startScheduler() error {
	s.scheduler.Start()
	s.services = append(s.services, func() {
		// Fires being delivered get a moment; what is left is the turn
		// ledger's and the next start's.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.scheduler.Stop(ctx)
	})
	return nil
}
