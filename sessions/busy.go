package sessions

import (
	"fmt"
	"time"
)

// BusyMode is what a message does when its session already has a turn
// running or waiting.
type BusyMode string

// Busy modes.
const (
	// BusyQueue: each message is its own turn, after the ones before it.
	BusyQueue BusyMode = "queue"
	// BusyCollect: the messages that arrive while a turn runs or waits are
	// merged into one next turn — one agent call that sees each of them.
	BusyCollect BusyMode = "collect"
	// BusyInterrupt: a new message cancels the running turn (its partial
	// reply is stored interrupted) and one turn answers everything not
	// yet answered.
	BusyInterrupt BusyMode = "interrupt"
)

// Busy-mode defaults.
const (
	DefaultDebounceMax = 5 * time.Second
	DefaultMaxBatch    = 20
)

// BusyPolicy is one channel's busy mode and debounce.
type BusyPolicy struct {
	Mode BusyMode // default collect
	// Debounce: after a message, wait this long for more before starting
	// its turn; each new message restarts the wait, up to DebounceMax
	// after the first.
	Debounce    time.Duration
	DebounceMax time.Duration // default 5s
	MaxBatch    int           // messages one turn takes at most (default 20; queue: 1)
}

// Validate reports a policy that cannot be applied.
func (p BusyPolicy) Validate() error {
	switch p.Mode {
	case "", BusyQueue, BusyCollect, BusyInterrupt:
	default:
		return fmt.Errorf("unknown busy mode %q (queue, collect or interrupt)", p.Mode)
	}
	if p.Debounce < 0 || p.DebounceMax < 0 || p.MaxBatch < 0 {
		return fmt.Errorf("debounce and max_batch must not be negative")
	}
	return nil
}

// withDefaults fills the zero fields.
func (p BusyPolicy) withDefaults() BusyPolicy {
	if p.Mode == "" {
		p.Mode = BusyCollect
	}
	if p.DebounceMax <= 0 {
		p.DebounceMax = DefaultDebounceMax
	}
	if p.DebounceMax < p.Debounce {
		p.DebounceMax = p.Debounce
	}
	if p.MaxBatch <= 0 {
		p.MaxBatch = DefaultMaxBatch
	}
	if p.Mode == BusyQueue {
		p.MaxBatch = 1
	}
	return p
}
