package mcpclient

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/chatgate/chatgate/agent"

	"github.com/chatgate/chatgate/tools"
)

// Offer is a Set narrowed by who asks: the session manager's Toolbox.
// Servers names the servers a channel's user gets (the policy ladder,
// which is the gateway's, not this package's); nil Servers offers every
// server, and an empty answer none.
type Offer struct {
	Set     *Set
	Servers func(channel, userID string) []string
}

// Offered are the tools of the servers the channel's user gets. A
// server still starting (its first try not over) is waited for, within
// its timeout: a turn that starts then is offered its tools, rather than
// none.
func (o Offer) Offered(channel, userID string) []agent.Tool {
	if o.Set == nil {
		return nil
	}
	if o.Servers == nil {
		o.Set.WaitStarting(nil)
		return o.Set.Tools(nil)
	}
	servers := o.Servers(channel, userID)
	if len(servers) == 0 {
		return nil
	}
	o.Set.WaitStarting(servers)
	return o.Set.Tools(servers)
}

// tools.Rule is how the tool of that name is run for a turn of the channel's
// user: false when the policy does not offer its server to them (the
// same policy as Offered: a model may name any tool, and a tool it was
// never offered never runs), or when its server did not list it. Once
// the server is one they get, it is waited for until it was tried
// (WaitTried): a gateway just started may run a turn stored before it
// stopped before its servers listed their tools, and a call of that turn
// is run by its server's rule, not as a tool nobody offers.
func (o Offer) Rule(ctx context.Context, channel, userID, name string) (tools.Rule, bool) {
	if o.Set == nil {
		return tools.Rule{}, false
	}
	server, tool, ok := strings.Cut(name, tools.Separator)
	if !ok || tool == "" {
		return tools.Rule{}, false
	}
	if o.Servers != nil && !slices.Contains(o.Servers(channel, userID), server) {
		return tools.Rule{}, false
	}
	_ = o.Set.WaitTried(ctx, server) // on ctx's end, the caller stops
	return o.Set.Rule(name)
}

// Call is Set.Call.
func (o Offer) Call(ctx context.Context, name, arguments, key string) (tools.Result, error) {
	if o.Set == nil {
		return tools.Result{}, fmt.Errorf("call %s: no tool servers: %w", name, ErrUnknownTool)
	}
	return o.Set.Call(ctx, name, arguments, key)
}
