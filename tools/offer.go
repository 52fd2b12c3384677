package tools

import (
	"context"

	"github.com/chatgate/chatgate/agent"
)

// Offer is a Set narrowed by who asks: the session manager's Toolbox.
// Servers names the servers a channel's user gets (the policy ladder,
// which is the gateway's, not this package's); nil Servers offers every
// server, and an empty answer none.
type Offer struct {
	Set     *Set
	Servers func(channel, userID string) []string
}

// Offered are the tools of the servers the channel's user gets.
func (o Offer) Offered(channel, userID string) []agent.Tool {
	if o.Set == nil {
		return nil
	}
	if o.Servers == nil {
		return o.Set.Tools(nil)
	}
	servers := o.Servers(channel, userID)
	if len(servers) == 0 {
		return nil
	}
	return o.Set.Tools(servers)
}

// Rule is Set.Rule.
func (o Offer) Rule(name string) (Rule, bool) { return o.Set.Rule(name) }

// Call is Set.Call.
func (o Offer) Call(ctx context.Context, name, arguments, key string) (Result, error) {
	return o.Set.Call(ctx, name, arguments, key)
}
