package sessions

// The models a session key may choose (agent.models): the choice is one
// row per key (ledger.ModelChoice), kept across resets, and the key's
// turns ask for the chosen model (agent.Request.Model) and are priced
// with its prices. A key that chose nothing — or chose a model no longer
// offered — runs on the default: the offered model whose id is the
// agent's own, else the agent's own model.
//
// Turns read the choice under the key's state lock, from a small cache
// in front of the store: a choice made here updates it under the same
// lock; one made on another replica reaches it as an event (EventModel)
// that drops the key's entry, and a lost notification drops them all.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// Model is one of the models a session key may choose.
type Model struct {
	// Name is what users see and choose.
	Name string
	// ID is the model id sent to the API.
	ID string
	// ContextTokens is its context window (0: unknown).
	ContextTokens int
	// Prices per 1,000 tokens, for the cost of its replies.
	PricePer1KPrompt     float64
	PricePer1KCompletion float64
}

// Errors of ChooseModel.
var (
	ErrNoModels     = errors.New("this gateway offers no choice of model (agent.models is not set)")
	ErrUnknownModel = errors.New("no model of that name is offered")
)

// ModelState is what a session key runs on.
type ModelState struct {
	// Models are the models it may choose (agent.models), in the
	// configuration's order; none when no choice is offered.
	Models []Model
	// Chosen is the name of the model the key chose ("" none).
	Chosen string
	// Current is the model its next turn uses. Its Name is "" when it is
	// the agent's own model, not one of Models.
	Current Model
	// Default is what a key that chose nothing runs on: the offered
	// model whose id is the agent's own, else the agent's own model
	// (Name ""). UsesDefault is set when Current is it: the key chose
	// nothing, or chose a model no longer offered (Gone).
	Default     Model
	UsesDefault bool
	Gone        bool
}

// choiceCacheSize bounds the cached choices (a name per key).
const choiceCacheSize = 16384

// modelChoices caches the keys' choices. gen moves whenever another
// replica's choice drops entries, so that a read that began before it
// does not cache what it read.
type modelChoices struct {
	cache *lru.Cache[string, string]
	gen   atomic.Uint64
}

func newModelChoices() *modelChoices {
	return &modelChoices{cache: must(lru.New[string, string](choiceCacheSize))}
}

// forget drops the key's cached choice ("" : every key's).
func (c *modelChoices) forget(key string) {
	c.gen.Add(1)
	if key == "" {
		c.cache.Purge()
		return
	}
	c.cache.Remove(key)
}

// lookup is the offered model of that name, whatever its case (names
// differ in more than case).
func (s *liveSettings) lookup(name string) (Model, bool) {
	for _, md := range s.models {
		if strings.EqualFold(md.Name, name) {
			return md, true
		}
	}
	return Model{}, false
}

// defaultModel is what a key that chose nothing runs on: the offered
// model whose id is the agent's own, else the agent's own model.
func (s *liveSettings) defaultModel() Model {
	id := s.agent.Model()
	for _, md := range s.models {
		if md.ID == id {
			if md.ContextTokens == 0 {
				md.ContextTokens = s.contextTokens
			}
			return md
		}
	}
	return Model{ID: id, ContextTokens: s.contextTokens}
}

// stateOf is the ModelState of a key that chose chosen.
func (s *liveSettings) stateOf(chosen string) ModelState {
	st := ModelState{Models: s.models, Chosen: chosen, Default: s.defaultModel()}
	if md, ok := s.lookup(chosen); ok && chosen != "" {
		st.Current = md
		return st
	}
	st.Current, st.UsesDefault, st.Gone = st.Default, true, chosen != ""
	return st
}

// spec is what a request asks for to run on the key's current model:
// nil for the agent's own.
func (st ModelState) spec() *agent.ModelSpec {
	if st.Current.Name == "" {
		return nil
	}
	return &agent.ModelSpec{Name: st.Current.Name, ID: st.Current.ID, PricePer1KPrompt: st.Current.PricePer1KPrompt, PricePer1KCompletion: st.Current.PricePer1KCompletion}
}

// forgetChoice drops the key's cached choice of model ("": every key's),
// read again at its next turn: another replica chose, or choices were
// purged.
func (s *Standing) forgetChoice(key string) { s.choices.forget(key) }

// OffersModels reports whether session keys may choose a model
// (agent.models is set).
func (s *Standing) OffersModels() bool { return len(s.turns.settings().models) > 0 }

// ReadsImages reports whether the agent is given the images users send;
// without it they are stored and the model is told of them only, and a
// channel can tell its users so.
func (s *Standing) ReadsImages() bool { return agent.ReadsImages(s.turns.settings().agent) }

// chosenModel is the name of the model the key chose ("" none). Called
// under the key's state lock; no storage call without agent.models.
func (s *Standing) chosenModel(ctx context.Context, key string, live *liveSettings) (string, error) {
	if len(live.models) == 0 {
		return "", nil
	}
	if name, ok := s.choices.cache.Get(key); ok {
		return name, nil
	}
	gen := s.choices.gen.Load()
	name, err := s.store.ModelChoice(ctx, key)
	if err != nil {
		return "", err
	}
	if s.choices.gen.Load() == gen {
		s.choices.cache.Add(key, name)
	}
	return name, nil
}

// modelSpec is the model the key's next turn asks for (nil: the agent's
// own). Called under the key's state lock.
func (s *Standing) modelSpec(ctx context.Context, key string) (*agent.ModelSpec, error) {
	live := s.turns.settings()
	if len(live.models) == 0 {
		return nil, nil
	}
	chosen, err := s.chosenModel(ctx, key, live)
	if err != nil {
		return nil, err
	}
	return live.stateOf(chosen).spec(), nil
}

// Models reports the models the key may choose, the one it chose and the
// one its next turn uses.
func (s *Standing) Models(ctx context.Context, in Inbound) (ModelState, error) {
	if in.Channel == "" || in.SessionKey == "" {
		return ModelState{}, ErrBadInbound
	}
	release, err := s.turns.acquire(ctx, in.SessionKey)
	if err != nil {
		return ModelState{}, err
	}
	defer release()
	live := s.turns.settings()
	chosen, err := s.chosenModel(ctx, in.SessionKey, live)
	if err != nil {
		return ModelState{}, err
	}
	return live.stateOf(chosen), nil
}

// ChooseModel stores the key's choice of the offered model name (any
// case; "" goes back to the default) for its next turns, across resets.
// A turn running now finishes on the model it started with.
func (s *Standing) ChooseModel(ctx context.Context, in Inbound, name string) (ModelState, error) {
	if in.Channel == "" || in.SessionKey == "" {
		return ModelState{}, ErrBadInbound
	}
	live := s.turns.settings()
	if len(live.models) == 0 {
		return ModelState{}, ErrNoModels
	}
	chosen := ""
	if name != "" {
		md, ok := live.lookup(name)
		if !ok {
			return ModelState{}, fmt.Errorf("%w: %q", ErrUnknownModel, name)
		}
		chosen = md.Name
	}
	release, err := s.turns.acquire(ctx, in.SessionKey)
	if err != nil {
		return ModelState{}, err
	}
	defer release()
	if err := s.store.SetModelChoice(ctx, in.SessionKey, chosen, s.now()); err != nil {
		// It may have landed: the next turn reads it again.
		s.choices.cache.Remove(in.SessionKey)
		return ModelState{}, err
	}
	s.choices.cache.Add(in.SessionKey, chosen)
	s.announce(ledger.Event{Kind: ledger.EventModel, Channel: in.Channel, Key: in.SessionKey})
	return live.stateOf(chosen), nil
}

// must returns v, for constructors that fail only on arguments known good.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
