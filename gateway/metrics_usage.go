package gateway

import "github.com/prometheus/client_golang/prometheus"

// usageMetrics count what turns spend with the model, as the usage
// tallies store it (sessions.Standing.usageFor), and the turns a budget
// refused.
type usageMetrics struct {
	tokens  *prometheus.CounterVec
	cost    *prometheus.CounterVec
	refused *prometheus.CounterVec
}

func newUsageMetrics(reg *prometheus.Registry) *usageMetrics {
	u := &usageMetrics{
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatgate_model_tokens_total",
			Help: "Model tokens spent by stored turns, tool rounds and summaries, by channel, model and kind (prompt, completion).",
		}, []string{"channel", "model", "kind"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatgate_model_cost_total",
			Help: "Model cost of stored turns, tool rounds and summaries, in the configured prices' unit, by channel and model.",
		}, []string{"channel", "model"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatgate_budget_refusals_total",
			Help: "Messages answered with the budget reply and no model call, by channel and budget (tokens_per_day, cost_per_day, cost_per_month).",
		}, []string{"channel", "budget"}),
	}
	reg.MustRegister(u.tokens, u.cost, u.refused)
	return u
}

// Spent implements sessions.Observer.
func (m *Metrics) Spent(channel, model string, prompt, completion int64, cost float64) {
	if prompt > 0 {
		m.usage.tokens.WithLabelValues(channel, model, "prompt").Add(float64(prompt))
	}
	if completion > 0 {
		m.usage.tokens.WithLabelValues(channel, model, "completion").Add(float64(completion))
	}
	if cost > 0 {
		m.usage.cost.WithLabelValues(channel, model).Add(cost)
	}
}

// BudgetRefused implements sessions.Observer.
func (m *Metrics) BudgetRefused(channel, budget string) {
	m.usage.refused.WithLabelValues(channel, budget).Inc()
}
