package store

// Kept session leases. Taking and giving back a lease for every turn costs
// two statements (and two transactions) a turn, more than the turn's own
// storage work rides on. A replica therefore keeps a lease it took across
// its turns of the key, and the next turn reuses it without a statement.
// It gives the lease back
//   - when no turn used it for leaseIdle (many at a time, one statement);
//   - at the end of a turn once it is leaseKeep old, so that a replica
//     whose request was lost waits a few seconds at most;
//   - at once when another replica asks for it (ledger.EventWant, sent by a
//     replica that found the lease held), or at the end of the turn
//     holding it;
//   - when this replica's heartbeat is not known to have landed lately:
//     the others may judge it gone and take its leases, so a kept lease
//     is no longer known to be held.
// A lease row is deleted only by its holder (a uuid per acquisition), so
// a late give-back never frees a lease taken again since.

import (
	"context"
	"sync"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

const (
	// leaseIdle is how long a kept lease waits for the key's next turn.
	leaseIdle = time.Second
	// leaseKeep is how long after its acquisition a lease is reused.
	leaseKeep = 5 * time.Second
	// leaseSweep is how often unused leases are looked for.
	leaseSweep = 250 * time.Millisecond
)

type leaseID struct{ replica, key string }

type keptLease struct {
	holder string
	taken  time.Time // when its row was written
	busy   bool      // a turn holds it
	idle   time.Time // when its last turn ended
	wanted bool      // another replica asked for it
}

// leaseRow names one acquisition's row.
type leaseRow struct{ key, holder string }

// keptLeases is a leaser's kept leases, and when each replica's last
// heartbeat that landed was sent.
type keptLeases struct {
	// leaser gives leases back, and its closed ends the sweep.
	leaser   *leaser
	mu       sync.Mutex
	leases   map[leaseID]*keptLease
	beats    map[string]time.Time
	sweeping bool
}

// beat notes that replica's heartbeat, sent at sent, landed.
func (k *keptLeases) beat(replica string, sent time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.beats == nil {
		k.beats = map[string]time.Time{}
	}
	if sent.After(k.beats[replica]) {
		k.beats[replica] = sent
	}
}

// fresh: the others cannot have judged replica gone yet. They do after
// ttl without a heartbeat (by the database's clock, which stamped the last
// one no earlier than it was sent); a third of it is left as margin.
// Called with k.mu held.
func (k *keptLeases) fresh(replica string, ttl time.Duration, now time.Time) bool {
	b, ok := k.beats[replica]
	return ok && now.Sub(b) < ttl*2/3
}

// reuse takes a kept lease for a turn, when it may be.
func (k *keptLeases) reuse(id leaseID, ttl time.Duration, now time.Time) (func(), bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l := k.leases[id]
	if l == nil || l.busy || l.wanted || now.Sub(l.taken) >= leaseKeep || !k.fresh(id.replica, ttl, now) {
		return nil, false
	}
	l.busy = true
	return k.releaser(id, l.holder, ttl), true
}

// took records a lease just written for a turn and returns its release.
func (k *keptLeases) took(id leaseID, holder string, ttl time.Duration, now time.Time) func() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.leases == nil {
		k.leases = map[leaseID]*keptLease{}
	}
	// An entry of an earlier acquisition names a row this one replaced.
	k.leases[id] = &keptLease{holder: holder, taken: now, busy: true}
	return k.releaser(id, holder, ttl)
}

// releaser is what a turn calls when it ends: the lease is kept for the
// next turn, or given back.
func (k *keptLeases) releaser(id leaseID, holder string, ttl time.Duration) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			now := time.Now()
			k.mu.Lock()
			if l := k.leases[id]; l != nil && l.holder == holder {
				if !l.wanted && now.Sub(l.taken) < leaseKeep && k.fresh(id.replica, ttl, now) {
					l.busy, l.idle = false, now
					start := !k.sweeping
					k.sweeping = true
					k.mu.Unlock()
					if start {
						go k.sweep(ttl)
					}
					return
				}
				delete(k.leases, id)
			}
			k.mu.Unlock()
			k.leaser.giveBack([]leaseRow{{id.key, holder}}, ttl)
		})
	}
}

// sweep gives back, every leaseSweep, the kept leases no turn uses,
// until the store closes (which gives back the rest).
func (k *keptLeases) sweep(ttl time.Duration) {
	t := time.NewTicker(leaseSweep)
	defer t.Stop()
	for {
		select {
		case <-k.leaser.closed:
			return
		case <-t.C:
		}
		if rows := k.take(false, time.Now()); len(rows) > 0 {
			k.leaser.giveBack(rows, ttl)
		}
	}
}

// take removes the leases to give back now — with all, every one no turn
// holds — and returns their rows.
func (k *keptLeases) take(all bool, now time.Time) []leaseRow {
	k.mu.Lock()
	defer k.mu.Unlock()
	var rows []leaseRow
	for id, l := range k.leases {
		if l.busy && !all {
			continue
		}
		if all || l.wanted || now.Sub(l.idle) >= leaseIdle || now.Sub(l.taken) >= leaseKeep {
			delete(k.leases, id)
			rows = append(rows, leaseRow{id.key, l.holder})
		}
	}
	return rows
}

// retire forgets replica's heartbeat, so that it keeps no lease from now
// on, and takes every lease it keeps (a clean stop: its turns ended).
func (k *keptLeases) retire(replica string) []leaseRow {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.beats, replica)
	var rows []leaseRow
	for id, l := range k.leases {
		if id.replica == replica {
			delete(k.leases, id)
			rows = append(rows, leaseRow{id.key, l.holder})
		}
	}
	return rows
}

// wanted handles another replica's request for a key's lease: a kept
// one no turn holds is given back now, a held one when its turn ends.
func (k *keptLeases) wanted(ev ledger.Event) {
	if ev.Kind != ledger.EventWant {
		return
	}
	var rows []leaseRow
	k.mu.Lock()
	for replica := range k.beats {
		if replica == ev.Origin {
			continue
		}
		id := leaseID{replica: replica, key: ev.Key}
		l := k.leases[id]
		switch {
		case l == nil:
		case l.busy:
			l.wanted = true
		default:
			delete(k.leases, id)
			rows = append(rows, leaseRow{ev.Key, l.holder})
		}
	}
	k.mu.Unlock()
	if len(rows) > 0 {
		go k.leaser.giveBack(rows, ledger.LeaseTTL)
	}
}

// giveBack deletes lease rows, in one statement; when that fails they are
// deleted in the background once the database answers.
func (l *leaser) giveBack(rows []leaseRow, ttl time.Duration) {
	if l.unleaseRows(rows) != nil {
		for _, r := range rows {
			go l.retryUnlease(r.key, r.holder, ttl)
		}
	}
}

func (l *leaser) unleaseRows(rows []leaseRow) error {
	keys := make([]string, len(rows))
	holders := make([]string, len(rows))
	for i, r := range rows {
		keys[i], holders[i] = r.key, r.holder
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := l.pool.ExecContext(ctx, pgGiveBackLeases, keys, holders)
	return err
}

// pgGiveBackLeases deletes the leases of the given keys that the given
// holders still hold.
var pgGiveBackLeases = `DELETE FROM session_leases AS l USING ` + pgArrayRows("k $1::text[]", "h $2::text[]") + ` AS g
	WHERE l.session_key = g.k AND l.holder = g.h`

// closeLeases gives back every kept lease when the store closes.
func (l *leaser) closeLeases() {
	if rows := l.kept.take(true, time.Now()); len(rows) > 0 {
		l.unleaseRows(rows) // else they end with this replica's heartbeat
	}
}
