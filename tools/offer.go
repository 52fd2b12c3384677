package tools

import (
	"context"
	"fmt"
	"strings"

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

// Rule is Set.Rule, once the tool's server was tried (WaitTried): a
// gateway just started may run a turn stored before it stopped before
// its servers listed their tools, and a call of that turn is run by its
// server's rule, not as a tool nobody offers.
func (o Offer) Rule(ctx context.Context, name string) (Rule, bool) {
	if o.Set == nil {
		return Rule{}, false
	}
	if server, _, ok := strings.Cut(name, Separator); ok {
		_ = o.Set.WaitTried(ctx, server) // on ctx's end, the caller stops
	}
	return o.Set.Rule(name)
}

// Call is Set.Call.
func (o Offer) Call(ctx context.Context, name, arguments, key string) (Result, error) {
	if o.Set == nil {
		return Result{}, fmt.Errorf("call %s: no tool servers: %w", name, ErrUnknownTool)
	}
	return o.Set.Call(ctx, name, arguments, key)
}
