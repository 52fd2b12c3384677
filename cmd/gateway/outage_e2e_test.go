package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/chatgate/chatgate/config"
	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
)

// The end-to-end database outage: the built gateway on PostgreSQL through
// toxiproxy, a streaming model server and a channel's real clients. For
// each moment of a turn, ten users send three messages 300 ms apart,
// PostgreSQL becomes unreachable (new connections refused, open ones
// closed) at that moment and comes back after the outage; the gateway is
// never restarted. Afterwards every message has reached the model once
// and its user has the reply, the ledger holds one final reply per turn,
// no session lease is left, and each user's next message is answered.
// A 4 s outage tells nobody of a delay; a long one (30 s, 90 s: longer
// than the delay notice, and than the lease) tells each waiting user
// once. On Telegram no getUpdates ever confirms an update whose message
// is neither stored nor held in the bot's stored offset state.

// The moments an outage starts at, in a turn's order.
const (
	atDebounce = "debounce"  // the users' first messages are stored; the rest arrive, and the debounce ends, while cut
	atClaim    = "claim"     // a turn's session lease is taken and its claim on the way
	atStream   = "midstream" // every model call is streaming; the database is back before they end
	atStore    = "store"     // every model call is streaming; they end while cut, so no reply can be stored
	atDelivery = "delivery"  // the replies are sent (Telegram: sendMessage answered) right after the cut, before their marks
)

var outageMoments = []string{atDebounce, atClaim, atStream, atStore, atDelivery}

const (
	outageUsers    = 10
	outageMessages = 3
	outageGap      = 300 * time.Millisecond
	// answerWithin is how long after the database is back every message
	// must be answered, with the gateway running on as it is.
	answerWithin = 15 * time.Second
	// delayNotice is session.delay_notice, which the rigs leave at its
	// default: a user whose message waits on the database this long is
	// told so, once.
	delayNotice = config.DefaultDelayNotice
)

func TestOutageTelegram(t *testing.T) {
	t.Parallel()
	outageRuns(t, "telegram")
}

func TestOutageWebSocket(t *testing.T) {
	t.Parallel()
	outageRuns(t, "websocket")
}

// outageRuns runs a 4 s outage at each moment, one after the other on
// one gateway, and meanwhile each long outage on a gateway of its own.
// The long ones are subtests started from goroutines of their own, not
// parallel subtests: those would wait for go test's -parallel slots (as
// many as the machine has cores) behind the 4 s runs, and the file would
// take the sum of the outages rather than the longest.
func outageRuns(t *testing.T, channel string) {
	var long sync.WaitGroup
	defer long.Wait()
	for _, outage := range longOutages {
		if testing.Short() {
			break
		}
		long.Go(func() { t.Run(fmt.Sprintf("long-%s", outage), func(t *testing.T) { longOutage(t, channel, outage) }) })
	}
	rig := newOutageRig(t, channel, false)
	for _, moment := range outageMoments {
		t.Run(moment, func(t *testing.T) { outageAt(t, rig, moment, 4*time.Second) })
	}
	stopGateway(t, rig.gw) // and it stops cleanly, its race detector silent
}

// The same moments with a database that stops answering instead of
// going away: for 4 s every byte between gateway and PostgreSQL is
// dropped, both ways, and nothing is closed — a frozen server, a network
// losing everything. A request on its way at the moment may run with its
// answer lost; the ones after it never arrive, and whoever waits for them
// waits until its own deadline (storage.timeout, 2 s here), also after
// the database answers again: nothing a stalled connection lost is ever
// answered. The invariants are the cut's.
func TestStallTelegram(t *testing.T) {
	t.Parallel()
	stallRuns(t, "telegram")
}

func TestStallWebSocket(t *testing.T) {
	t.Parallel()
	stallRuns(t, "websocket")
}

func stallRuns(t *testing.T, channel string) {
	rig := newOutageRig(t, channel, true)
	for _, moment := range outageMoments {
		t.Run(moment, func(t *testing.T) { outageAt(t, rig, moment, 4*time.Second) })
	}
	stopGateway(t, rig.gw)
}

// The long outages outlast the delay notice (20 s) and the Telegram
// poller role (15 s); 90 s outlasts the lease (30 s) too: every turn's
// and session's lease has expired when the database comes back.
var longOutages = []time.Duration{30 * time.Second, 90 * time.Second}

// longAnswerWithin is how long after a long outage every message must be
// answered. The slowest way back is a Telegram update retried from
// memory: its tries are 0.5 s apart, doubling up to 30 s, so the
// database may come back just after one and the next comes 30 s later;
// then the debounce (1.5 s), the model call and the reply's delivery and
// mark, a few seconds on a busy machine. (The WebSocket clients here
// resend a refused message after pauses that double up to 20 s, 25 s
// with jitter — the web page's go up to 30 s — and reconnect within
// 12.5 s; the session manager retries a turn within 2 s.)
const longAnswerWithin = 40 * time.Second

// atLate is the users of a long outage whose messages all come while the
// database is away: none of them is stored before it is back.
const atLate = "late"

// longOutage cuts PostgreSQL for outage, longer than the delay notice,
// with three groups of ten users waiting on it:
//   - store: every model call streams at the cut and ends while cut, so
//     each user's stored messages wait for their reply to be stored;
//   - debounce: each user's first message is stored and its turn waits
//     for the debounce; the other two come while cut (WebSocket: half of
//     the users lose their connection at the cut too);
//   - late: the users are online and send all three messages while cut.
//
// The gateway runs on throughout. Afterwards every message is answered
// once, within longAnswerWithin, the ledger is settled with no lease
// left, each user's next message is answered, and each user who was
// waiting when the delay notice came due was told exactly once: on
// Telegram every user (a stored message waited, or an update could not
// be stored); on WebSocket each user with an acknowledged message who
// was connected throughout (the notice is a frame to the connections
// open then), and nobody else.
func longOutage(t *testing.T, channel string, outage time.Duration) {
	r := newOutageRig(t, channel, false)
	groups := []string{atStore, atDebounce, atLate}
	text := func(m string, i, k int) string { return fmt.Sprintf("%s u%d m%d", m, i, k) }
	keys, texts := map[string][]string{}, map[string][]string{}
	var all []string
	for _, m := range groups {
		for i := range outageUsers {
			keys[m] = append(keys[m], r.users.key(m, i))
			for k := 1; k <= outageMessages; k++ {
				texts[m] = append(texts[m], text(m, i, k))
			}
		}
		all = append(all, keys[m]...)
	}
	var typing sync.WaitGroup
	typeAll := func(m string) {
		for i := range outageUsers {
			typing.Go(func() {
				for k := 1; k <= outageMessages; k++ {
					if k > 1 {
						time.Sleep(outageGap) // the users' pace, not a wait for the gateway
					}
					r.users.send(t, m, i, text(m, i, k))
				}
			})
		}
	}

	r.llm.hold(atStore)
	typeAll(atStore)
	r.llm.waitInFlight(t, atStore, outageUsers)
	for i := range outageUsers {
		r.users.join(t, atLate, i)
	}
	typeAll(atDebounce)
	if !waitUntil(time.Minute, func() bool { return r.usersWithStored(keys[atDebounce]) == outageUsers }) {
		t.Fatalf("the debounce users' first messages were not stored")
	}
	r.proxy.Cut()
	cut := time.Now()
	atCut := r.state(all)
	r.llm.release(atStore) // the answers end while nothing can be stored
	r.users.dropConnections(atDebounce)
	time.Sleep(time.Second) // the late users' messages come a second into the outage
	typeAll(atLate)
	time.Sleep(time.Until(cut.Add(outage))) // the outage itself

	// Who is to be told: nothing changed in the ledger since the cut.
	want := map[string][]noticeWant{}
	for _, m := range groups {
		for i, key := range keys[m] {
			want[m] = append(want[m], r.noticeWant(m, i, key, cut))
		}
	}
	if tg, ok := r.users.(*tgOutageUsers); ok {
		// While cut, the bot could store nothing, its offset state
		// included, so what is stored now is what was when the cut
		// came: no getUpdates since may have confirmed an update whose
		// message is neither stored nor held in the stored state. (A
		// write on its way as the cut comes can land: the proxy stops
		// accepting before it closes the open connections, so an append
		// that needs a new connection can fail while the offset state
		// that holds its update goes out on one still open.)
		polls, highest := tg.polls(cut, time.Now())
		lowest, err := tg.lowestOpen()
		if err != nil {
			t.Fatalf("reading what the bot stored: %v", err)
		}
		if highest > lowest {
			t.Errorf("during the outage getUpdates asked with offset %d, past update %d, whose message is neither stored nor held in the stored offset state", highest, lowest)
		}
		t.Logf("%s outage: %d getUpdates while cut, the highest offset %d; the lowest update neither stored nor held when it ended %d", outage, polls, highest, lowest)
	}
	r.proxy.Heal(t)
	healed := time.Now()
	early := 0
	for s, as := range r.users.answers() {
		if slices.Contains(groups, momentOf(s)) && as[0].Before(healed) {
			early++
		}
	}
	if early > 0 {
		t.Errorf("%d messages answered while the database was away: a reply went out before it was stored", early)
	}
	typing.Wait()
	for _, m := range groups {
		res := r.verify(t, m, keys[m], texts[m], healed, longAnswerWithin, want[m])
		t.Logf("%s outage, %s users (at the cut: %s): %s; delay notices wanted %v", outage, m, atCut, res, want[m])
	}
	t.Logf("%s outage: after it%s", outage, r.users.stats())
	stopGateway(t, r.gw)
}

// noticeWant is how many delay notices user i of moment m (session key
// key) is to get for an outage that began at cut and is still on.
func (r *outageRig) noticeWant(m string, i int, key string, cut time.Time) noticeWant {
	if r.channel == "telegram" {
		// Each user's messages were stored before the cut, or come while
		// cut and cannot be stored.
		return noticeWant{n: 1, exact: true}
	}
	stored := r.storedUserMessages([]string{key}) > 0
	since, online := r.users.online(m, i)
	switch {
	case !stored:
		return noticeWant{n: 0, exact: true} // refused with internal, not acknowledged: nothing waits
	case online && since.Before(cut):
		return noticeWant{n: 1, exact: true}
	case !online && since.Before(cut.Add(delayNotice)):
		return noticeWant{n: 0, exact: true} // no connection to tell it to when it came due
	}
	return noticeWant{n: 1}
}

// usersWithStored counts the keys that have a user message stored.
func (r *outageRig) usersWithStored(keys []string) int {
	var n int64
	r.db.Raw(`SELECT count(DISTINCT c.session_key) FROM messages m JOIN conversations c ON c.id = m.conversation_id
		WHERE c.session_key IN ? AND m.role = 'user'`, keys).Scan(&n)
	return int(n)
}

// outageRig is one gateway on PostgreSQL through a proxy, its model
// server and the channel its users talk through. The moments share it,
// one after the other, each with users of its own.
type outageRig struct {
	channel string
	// stall: each outage stalls the database (pgtest.Proxy.Stall)
	// instead of cutting it.
	stall bool
	// slack is added to answerWithin: a request sent while the database
	// stalled fails only at its deadline, up to 1.5 × storage.timeout
	// after it was sent (an idle connection's check, two of them, then a
	// new connection's), also when that is after the database answers.
	slack time.Duration
	proxy *pgtest.Proxy
	db    *gorm.DB // straight to PostgreSQL, not through the proxy
	llm   *outageLLM
	gw    *process
	users outageChannel
}

// outageChannel is how a moment's users talk to the gateway.
type outageChannel interface {
	// key is the session key of user i of moment m.
	key(m string, i int) string
	// send sends text as user i of moment m.
	send(t *testing.T, m string, i int, text string)
	// answers lists, per message text, when each reply that answers it
	// reached its user, oldest first (Telegram: each sendMessage;
	// WebSocket: each reply seq, however many frames carried it).
	answers() map[string][]time.Time
	// armDelivery makes cut run once the replies of moment m's users
	// are on their way: on Telegram once each of them is sent (their
	// sendMessage is answered only after cut), on WebSocket at the first
	// reply frame.
	armDelivery(m string, cut func())
	// stats tells what the clients did besides sending, since the last
	// call ("; …"), or "".
	stats() string
	// dropConnections cuts the network of half of moment m's users, who
	// then reconnect.
	dropConnections(m string)
	// notices counts the delay notices user i of moment m was given
	// (Telegram: sendMessage calls in the user's chat whose text is
	// sessions.DelayText; WebSocket: notice frames with code delayed,
	// over all the user's connections).
	notices(m string, i int) int
	// join brings user i of moment m online without sending anything
	// (WebSocket: connected; Telegram: nothing to do).
	join(t *testing.T, m string, i int)
	// online reports whether user i of moment m can be sent frames now,
	// and since when that is so (or since when not). Telegram users
	// always can: their connection is Telegram's.
	online(m string, i int) (since time.Time, ok bool)
	// problems lists what the channel saw go wrong for moment m's users
	// besides their answers: a delay notice that is not about a message
	// of its user.
	problems(m string) []string
}

func newOutageRig(t *testing.T, channel string, stall bool) *outageRig {
	dsn := pgtest.DSN(t)
	proxy := pgtest.StartProxy(t, dsn)
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	llm := newOutageLLM()
	llmSrv := httptest.NewServer(llm)
	t.Cleanup(llmSrv.Close)
	addr := freeAddr(t)
	rig := &outageRig{channel: channel, stall: stall, proxy: proxy, db: db, llm: llm}
	// A stalled request fails at its deadline: shorter than the default
	// here, so that the rounds stay short. A cut fails requests at once.
	storageTimeout := ""
	if stall {
		storageTimeout = "  timeout: 2s"
		rig.slack = 3 * time.Second
	}
	var section string
	switch channel {
	case "telegram":
		tg := &tgOutageUsers{api: telegramtest.New(t), db: db, msgs: map[int64][]int{},
			updates: map[int]tgUpdate{}, stored: map[int]bool{}, handed: map[int]int{}}
		apiSrv := httptest.NewServer(tg)
		t.Cleanup(apiSrv.Close)
		// Busy mode and debounce are Telegram's defaults: collect, 1500 ms.
		section = fmt.Sprintf("  telegram:\n    token: %q\n    api_url: %s\n    poll_timeout: 1s\n", telegramtest.Token, apiSrv.URL)
		rig.users = tg
	case "websocket":
		// Collect is the default; the debounce is Telegram's, so that the
		// same moments exist (WebSocket's default is none).
		section = "    session: {busy_mode: collect, debounce_ms: 1500}\n"
		rig.users = &wsOutageUsers{addr: addr, users: map[string]*wsOutageUser{}}
	}
	rig.gw = startGateway(t, t.TempDir(), fmt.Sprintf(`
gateway:
  listen: %s
storage:
  driver: postgres
  dsn: %q
%s
agent:
  backend: openai
  openai: {base_url: %s/v1, model: m, max_retries: 0}
channels:
  websocket:
    rate_limit: {per_second: 1000, burst: 1000}
%s
shutdown:
  drain_timeout: 5s
log:
  level: warn
`, addr, proxy.DSN, storageTimeout, llmSrv.URL, section))
	waitHealthy(t, "http://"+addr)
	if ws, ok := rig.users.(*wsOutageUsers); ok {
		t.Cleanup(ws.close)
	}
	return rig
}

// outageAt runs one moment: the users' messages, an outage of the given
// length starting at the moment, and the invariants once it has ended.
// The gateway runs on throughout.
func outageAt(t *testing.T, r *outageRig, moment string, outage time.Duration) {
	text := func(i, k int) string { return fmt.Sprintf("%s u%d m%d", moment, i, k) }
	keys := make([]string, outageUsers)
	var texts []string
	for i := range outageUsers {
		keys[i] = r.users.key(moment, i)
		for k := 1; k <= outageMessages; k++ {
			texts = append(texts, text(i, k))
		}
	}
	cutDone := make(chan struct{})
	var cutOnce sync.Once
	var atCut string
	cut := func() {
		cutOnce.Do(func() {
			if r.stall {
				r.proxy.Stall(t)
			} else {
				r.proxy.Cut()
			}
			atCut = r.state(keys) + fmt.Sprintf(", %d model calls", r.llm.callCount(moment))
			close(cutDone)
		})
	}
	switch moment {
	case atStream, atStore:
		r.llm.hold(moment)
	case atDelivery:
		// The answers are held until every turn runs, so that the replies
		// go out together.
		r.llm.hold(moment)
		r.users.armDelivery(moment, cut)
	}

	// The users type: three messages 300 ms apart each.
	var typing sync.WaitGroup
	for i := range outageUsers {
		typing.Go(func() {
			for k := 1; k <= outageMessages; k++ {
				if k > 1 {
					time.Sleep(outageGap) // the users' pace, not a wait for the gateway
				}
				r.users.send(t, moment, i, text(i, k))
			}
		})
	}

	switch moment {
	case atDebounce:
		if !waitUntil(time.Minute, func() bool { return r.storedUserMessages(keys) >= outageUsers }) {
			t.Fatalf("the users' first messages were not stored")
		}
		cut()
		// Half the users lose their connection too: they reconnect while
		// the database is away, or after, and resend what was not
		// acknowledged.
		r.users.dropConnections(moment)
	case atClaim:
		// From the debounce's end on, every statement reaches PostgreSQL
		// 300 ms late: a turn's claim lands at least that long after its
		// session lease. The outage starts 200 ms after the first lease
		// landed, when every lease taken by then has its claim on the way.
		if !waitUntil(time.Minute, func() bool { return r.storedUserMessages(keys) == int64(len(texts)) }) {
			t.Fatalf("the users' messages were not stored")
		}
		r.proxy.Latency(t, 300*time.Millisecond)
		deadline := time.Now().Add(time.Minute)
		for r.leases(keys) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("no turn took its session lease")
			}
			time.Sleep(5 * time.Millisecond) // polling PostgreSQL for the lease
		}
		for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end) && r.leases(keys) < outageUsers; {
			time.Sleep(5 * time.Millisecond) // as above
		}
		cut()
		r.proxy.Latency(t, 0)
	case atStream, atStore:
		r.llm.waitInFlight(t, moment, outageUsers)
		cut()
		if moment == atStore {
			r.llm.release(moment) // the answers end while nothing can be stored
		}
	case atDelivery:
		r.llm.waitInFlight(t, moment, outageUsers)
		r.llm.release(moment)
		select {
		case <-cutDone:
		case <-time.After(time.Minute):
			t.Fatalf("the replies were never on their way")
		}
	}
	<-cutDone
	time.Sleep(outage) // the outage itself
	var marked int64
	r.db.Raw(`SELECT count(*) FROM messages m JOIN conversations c ON c.id = m.conversation_id
		WHERE c.session_key IN ? AND m.role = 'user' AND m.turn_state = 'delivered'`, keys).Scan(&marked)
	r.proxy.Heal(t)
	healed := time.Now()
	// The moment was where it should be: no reply goes out before it is
	// stored, and no delivery is marked while the database is away.
	early, earlyUsers := 0, map[string]bool{}
	for text, as := range r.users.answers() {
		if momentOf(text) == moment && as[0].Before(healed) {
			early++
			earlyUsers[strings.Fields(text)[1]] = true
		}
	}
	switch {
	case moment == atStore && early > 0:
		t.Errorf("%d messages answered while the database was away: a reply went out before it was stored", early)
	case moment == atDelivery && r.channel == "telegram" && len(earlyUsers) != outageUsers:
		t.Errorf("%d of %d users had a reply sent when the database came back; want all, each before its mark", len(earlyUsers), outageUsers)
	case moment == atDelivery && r.channel == "telegram" && marked != 0:
		t.Errorf("%d turns marked delivered while the database was away", marked)
	}
	if moment == atStream {
		r.llm.release(moment) // the answers end once the database is back
	}
	typing.Wait()

	// The outage is shorter than the delay notice: nobody is told of a delay.
	if outage >= delayNotice {
		t.Fatalf("a %s outage is not shorter than the delay notice (%s)", outage, delayNotice)
	}
	noNotice := make([]noticeWant, outageUsers)
	for i := range noNotice {
		noNotice[i] = noticeWant{n: 0, exact: true}
	}
	res := r.verify(t, moment, keys, texts, healed, answerWithin+r.slack, noNotice)
	t.Logf("moment %s, %s outage (at the cut: %s; when it ended: %d answered, %d marked delivered): %s%s",
		moment, outage, atCut, early, marked, res, r.users.stats())
}

// noticeWant is how many delay notices a user is to have had once a
// moment is over: exactly n, or, unless exact, at most n.
type noticeWant struct {
	n     int
	exact bool
}

func (w noticeWant) String() string {
	if w.exact {
		return strconv.Itoa(w.n)
	}
	return fmt.Sprintf("≤%d", w.n)
}

// verdict is what verify measured for one moment's users.
type verdict struct {
	messages, calls, answered, twice int
	longest, settled                 time.Duration
	nextAnswered                     int
	leases                           int64
	notices                          []int // per user
}

func (v verdict) String() string {
	return fmt.Sprintf("%d messages, %d model calls, %d answered, %d answered twice, longest wait after the database came back %.1f s, "+
		"ledger settled %.1f s after; next messages answered %d/%d; session leases left %d; delay notices per user %v",
		v.messages, v.calls, v.answered, v.twice, v.longest.Seconds(), v.settled.Seconds(), v.nextAnswered, len(v.notices), v.leases, v.notices)
}

// verify checks the invariants for the users of moment (session keys
// keys, who sent texts) once the database came back at healed: every
// message answered once, within of healed; the ledger settled, no
// session lease left; each user's next message answered; and each user
// i told of the delay as notices[i] says.
func (r *outageRig) verify(t *testing.T, moment string, keys, texts []string, healed time.Time, within time.Duration, notices []noticeWant) verdict {
	t.Helper()
	v := verdict{messages: len(texts)}
	// 0 unanswered, within after the outage ended.
	deadline := healed.Add(within)
	unanswered := func() []string {
		got := r.users.answers()
		var out []string
		for _, s := range texts {
			if len(got[s]) == 0 {
				out = append(out, s)
			}
		}
		return out
	}
	waitUntil(time.Until(deadline), func() bool { return len(unanswered()) == 0 })
	failed := false
	left := unanswered()
	if len(left) > 0 {
		failed = true
		t.Errorf("%d of %d messages unanswered %s after the outage ended: %v", len(left), len(texts), within, left)
	}
	// The ledger: each message stored once with one final reply, nothing
	// due, deliveries marked; no session lease left.
	var problem string
	waitUntil(time.Until(deadline), func() bool { problem = r.ledgerProblem(keys); return problem == "" })
	v.settled = time.Since(healed)
	if problem != "" {
		failed = true
		t.Errorf("the ledger %s after the outage ended: %s", within, problem)
	}
	waitUntil(max(time.Until(deadline), time.Second), func() bool {
		v.leases = -1
		r.db.Raw("SELECT count(*) FROM session_leases").Scan(&v.leases)
		return v.leases == 0
	})
	if v.leases != 0 {
		failed = true
		t.Errorf("%d session leases left %s after the outage ended", v.leases, within)
	}

	// Each user's next message is answered.
	next := make([]string, len(keys))
	for i := range keys {
		next[i] = fmt.Sprintf("%s u%d next", moment, i)
		r.users.send(t, moment, i, next[i])
	}
	waitUntil(answerWithin, func() bool {
		got := r.users.answers()
		return !slices.ContainsFunc(next, func(s string) bool { return len(got[s]) == 0 })
	})

	// 0 answered twice: the model ran once for each message (one run
	// answers a batch of a user's messages), and its user got one reply.
	runs := r.llm.runs(moment)
	got := r.users.answers()
	for _, s := range texts {
		if runs[s] > 1 || len(got[s]) > 1 {
			v.twice++
			failed = true
			t.Errorf("%q ran the model %d times and reached its user in %d replies, want once", s, runs[s], len(got[s]))
		}
		if len(got[s]) > 0 {
			v.answered++
			v.longest = max(v.longest, got[s][0].Sub(healed))
		}
	}
	for _, s := range next {
		if runs[s] == 1 && len(got[s]) == 1 {
			v.nextAnswered++
			continue
		}
		failed = true
		t.Errorf("the next message %q ran the model %d times and got %d replies, want 1 and 1", s, runs[s], len(got[s]))
	}
	v.calls = r.llm.callsAnswering(texts)

	// Each user told of the delay as often as they are to be.
	for _, p := range r.users.problems(moment) {
		failed = true
		t.Error(p)
	}
	v.notices = make([]int, len(keys))
	for i := range keys {
		n, want := r.users.notices(moment, i), notices[i]
		v.notices[i] = n
		switch {
		case want.exact && n != want.n:
			failed = true
			t.Errorf("%s was told of a delay %d times, want %d", keys[i], n, want.n)
		case n > want.n:
			failed = true
			t.Errorf("%s was told of a delay %d times, want at most %d", keys[i], n, want.n)
		}
	}
	if failed {
		r.dump(t, keys)
	}
	return v
}

// waitUntil polls cond until it holds or within has passed, and reports
// whether it held. It polls what other processes and goroutines change.
func waitUntil(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// state tells how far the turns of keys are: messages stored, session
// leases taken, messages claimed.
func (r *outageRig) state(keys []string) string {
	var claimed int64
	r.db.Raw(`SELECT count(*) FROM messages m JOIN conversations c ON c.id = m.conversation_id
		WHERE c.session_key IN ? AND m.role = 'user' AND m.turn_attempt > 0`, keys).Scan(&claimed)
	return fmt.Sprintf("%d messages stored, %d session leases, %d messages claimed", r.storedUserMessages(keys), r.leases(keys), claimed)
}

// leases counts the session leases of keys.
func (r *outageRig) leases(keys []string) int64 {
	var n int64
	r.db.Raw("SELECT count(*) FROM session_leases WHERE session_key IN ?", keys).Scan(&n)
	return n
}

// storedUserMessages counts the user messages stored for keys.
func (r *outageRig) storedUserMessages(keys []string) int64 {
	var n int64
	r.db.Raw(`SELECT count(*) FROM messages m JOIN conversations c ON c.id = m.conversation_id
		WHERE c.session_key IN ? AND m.role = 'user'`, keys).Scan(&n)
	return n
}

// ledgerRow is a message row with its turn.
type ledgerRow struct {
	SessionKey     string
	ConversationID string
	Seq            int64
	Role           string
	Content        string
	Status         string
	Error          string
	ToolCalls      string
	ReplyTo        int64
	TurnState      string
	TurnOwner      string
	TurnAttempt    int
	TurnLead       int64
	TurnDue        *time.Time
}

func (r *outageRig) ledger(keys []string) []ledgerRow {
	var rows []ledgerRow
	r.db.Raw(`SELECT c.session_key, m.conversation_id, m.seq, m.role, m.content, m.status, coalesce(m.error, '') AS error,
		coalesce(m.tool_calls, '') AS tool_calls, m.reply_to, m.turn_state, m.turn_owner, m.turn_attempt, m.turn_lead, m.turn_due
		FROM messages m JOIN conversations c ON c.id = m.conversation_id
		WHERE c.session_key IN ? ORDER BY c.session_key, m.conversation_id, m.seq`, keys).Scan(&rows)
	return rows
}

// ledgerProblem checks the stored ledger of keys: every user message
// stored once, with exactly one final reply (ok), none due; on Telegram
// each delivery marked. It returns the first problem, or "".
func (r *outageRig) ledgerProblem(keys []string) string {
	rows := r.ledger(keys)
	users := map[string]int{}
	for _, u := range rows {
		if u.Role != "user" {
			continue
		}
		users[u.Content]++
		lead := u.TurnLead
		if lead == 0 {
			lead = u.Seq
		}
		var finals []ledgerRow
		for _, a := range rows {
			if a.ConversationID == u.ConversationID && a.Role == "assistant" && a.Seq > u.Seq && a.ReplyTo == lead && a.ToolCalls == "" &&
				(a.Status != "interrupted" || (a.Error != "shutdown" && a.Error != "new message")) {
				finals = append(finals, a)
			}
		}
		switch {
		case len(finals) != 1:
			return fmt.Sprintf("%s seq %d %q has %d final replies, want 1", u.SessionKey, u.Seq, u.Content, len(finals))
		case finals[0].Status != "ok" || !slices.Contains(answeredBy(finals[0].Content), u.Content):
			return fmt.Sprintf("%s seq %d %q is answered %s %q (%s)", u.SessionKey, u.Seq, u.Content, finals[0].Status, finals[0].Content, finals[0].Error)
		case u.TurnDue != nil:
			return fmt.Sprintf("%s seq %d %q is answered and still due at %s", u.SessionKey, u.Seq, u.Content, u.TurnDue)
		case r.channel == "telegram" && u.TurnState != "delivered":
			return fmt.Sprintf("%s seq %d %q is %s, not marked delivered", u.SessionKey, u.Seq, u.Content, u.TurnState)
		}
	}
	if len(users) != len(keys)*outageMessages {
		return fmt.Sprintf("%d user messages stored, want %d", len(users), len(keys)*outageMessages)
	}
	for s, n := range users {
		if n != 1 {
			return fmt.Sprintf("%q stored %d times", s, n)
		}
	}
	return ""
}

// dump logs the ledger of keys and the end of the gateway's log.
func (r *outageRig) dump(t *testing.T, keys []string) {
	var b strings.Builder
	b.WriteString("conversation_id seq role turn_state turn_owner turn_attempt turn_lead turn_due | status error content\n")
	for _, m := range r.ledger(keys) {
		due := "-"
		if m.TurnDue != nil {
			due = m.TurnDue.Format("15:04:05.000")
		}
		fmt.Fprintf(&b, "%s %d %s %q %q %d %d %s | %s %q %q\n", m.ConversationID, m.Seq, m.Role, m.TurnState, m.TurnOwner,
			m.TurnAttempt, m.TurnLead, due, m.Status, m.Error, m.Content)
	}
	logs := strings.Split(r.gw.stderr.String(), "\n")
	t.Logf("ledger:\n%s\ngateway log (last 60 lines):\n%s", b.String(), strings.Join(logs[max(0, len(logs)-60):], "\n"))
}

// outageLLM is a streaming chat-completions server. Every answer is
// "answer to {…}" naming the user messages the call answers (those after
// the last assistant message), then " done". A moment's calls can be
// held: they stream a piece every 100 ms until released.
type outageLLM struct {
	mu       sync.Mutex
	cond     *sync.Cond
	calls    [][]string // each call's user messages to answer
	held     map[string]bool
	inFlight map[string]int
}

func newOutageLLM() *outageLLM {
	l := &outageLLM{held: map[string]bool{}, inFlight: map[string]int{}}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// momentOf is the moment a message belongs to: its first word.
func momentOf(text string) string {
	m, _, _ := strings.Cut(text, " ")
	return m
}

func (l *outageLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	data, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(data, &body); err != nil {
		http.Error(w, `{"error":{"message":"bad JSON"}}`, http.StatusBadRequest)
		return
	}
	var inputs []string
	for _, m := range body.Messages {
		switch m.Role {
		case "assistant":
			inputs = nil
		case "user":
			var s string
			json.Unmarshal(m.Content, &s)
			inputs = append(inputs, s)
		}
	}
	moment := ""
	if len(inputs) > 0 {
		moment = momentOf(inputs[0])
	}
	l.mu.Lock()
	l.calls = append(l.calls, inputs)
	l.inFlight[moment]++
	l.cond.Broadcast()
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.inFlight[moment]--
		l.cond.Broadcast()
		l.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	streamChunk(w, "answer to {"+strings.Join(inputs, "; ")+"}")
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for l.isHeld(moment) {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
			streamChunk(w, " .")
		}
	}
	streamChunk(w, " done")
	streamEnd(w)
}

func (l *outageLLM) isHeld(moment string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[moment]
}

// hold makes the calls of moment stream until release.
func (l *outageLLM) hold(moment string) {
	l.mu.Lock()
	l.held[moment] = true
	l.mu.Unlock()
}

func (l *outageLLM) release(moment string) {
	l.mu.Lock()
	delete(l.held, moment)
	l.mu.Unlock()
}

// wait waits, at most a minute, until cond holds under l.mu.
func (l *outageLLM) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	expired := false
	timer := time.AfterFunc(time.Minute, func() {
		l.mu.Lock()
		expired = true
		l.cond.Broadcast()
		l.mu.Unlock()
	})
	defer timer.Stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	for !cond() {
		if expired {
			t.Fatalf("gave up waiting: %s", what)
		}
		l.cond.Wait()
	}
}

// waitInFlight waits until n calls of moment run at once.
func (l *outageLLM) waitInFlight(t *testing.T, moment string, n int) {
	t.Helper()
	l.wait(t, fmt.Sprintf("%d model calls of %s at once", n, moment), func() bool { return l.inFlight[moment] >= n })
}

func (l *outageLLM) countLocked(moment string) int {
	n := 0
	for _, c := range l.calls {
		if len(c) > 0 && momentOf(c[0]) == moment {
			n++
		}
	}
	return n
}

// callCount counts the calls of moment so far.
func (l *outageLLM) callCount(moment string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.countLocked(moment)
}

// callsAnswering counts the calls that answered any of texts.
func (l *outageLLM) callsAnswering(texts []string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.calls {
		if slices.ContainsFunc(c, func(s string) bool { return slices.Contains(texts, s) }) {
			n++
		}
	}
	return n
}

// runs counts, per message of moment, the calls that answered it.
func (l *outageLLM) runs(moment string) map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, c := range l.calls {
		for _, s := range c {
			if momentOf(s) == moment {
				out[s]++
			}
		}
	}
	return out
}

// answered is the user messages a reply's text says it answers.
var answeredRE = regexp.MustCompile(`answer to \{([^}]*)\}`)

func answeredBy(reply string) []string {
	m := answeredRE.FindStringSubmatch(reply)
	if m == nil {
		return nil
	}
	return strings.Split(m[1], "; ")
}

// tgOutageUsers are the moments' Telegram users: private chats on the fake Bot
// API, which this front records the bot's sendMessage calls of and can
// hold them for the delivery moment.
type tgOutageUsers struct {
	api   *telegramtest.Server
	db    *gorm.DB // straight to PostgreSQL, not through the proxy
	mu    sync.Mutex
	sends []tgSend
	msgs  map[int64][]int // per chat, the ids of the messages its user sent
	hold  *tgHold
	// The offset: each update pushed, those whose message getUpdates
	// found stored, what was confirmed too early, and how often each
	// update was handed out.
	updates map[int]tgUpdate
	stored  map[int]bool
	early   []tgEarly
	handed  map[int]int
	again   int // updates handed out more than once, since stats last told
}

type tgUpdate struct {
	chat int64
	text string
}

// tgEarly is a getUpdates that confirmed an update whose message was not
// stored: Telegram would never send it again.
type tgEarly struct {
	chat int64
	what string
}

type tgSend struct {
	chat    int64
	text    string
	replyTo int
	at      time.Time
}

// tgHold holds the answer to each chat's first sendMessage until every
// chat has had one (or 20 s passed), then runs cut and lets them go.
type tgHold struct {
	chats map[int64]bool
	seen  map[int64]bool
	cut   func()
	once  sync.Once
	done  chan struct{}
}

func (h *tgHold) fire() {
	h.once.Do(func() {
		h.cut()
		close(h.done)
	})
}

func (u *tgOutageUsers) chat(m string, i int) int64 {
	return int64(1000*(slices.Index(chatMoments, m)+1) + i)
}

// chatMoments number the moments in chat ids.
var chatMoments = append(slices.Clone(outageMoments), atLate)

func (u *tgOutageUsers) join(*testing.T, string, int) {}

func (u *tgOutageUsers) online(string, int) (time.Time, bool) { return time.Time{}, true }

func (u *tgOutageUsers) key(m string, i int) string {
	return fmt.Sprintf("telegram:dm:%d", u.chat(m, i))
}

func (u *tgOutageUsers) send(t *testing.T, m string, i int, text string) {
	chat := u.chat(m, i)
	u.mu.Lock()
	defer u.mu.Unlock()
	id := u.api.Push(telegramtest.DM(chat, text))
	u.msgs[chat] = append(u.msgs[chat], id)
	u.updates[u.api.LastUpdateID()] = tgUpdate{chat: chat, text: text} // pushes are one at a time, under u.mu
}

// checkOffset records each update below offset — a getUpdates asking
// with offset confirms them, and Telegram never sends them again — whose
// message is neither stored nor held in the bot's stored offset state.
// An update found stored is not looked at again; one found held is, on
// every getUpdates, until its message is stored: the state must not
// forget it before.
func (u *tgOutageUsers) checkOffset(offset int) {
	u.mu.Lock()
	open := map[int]tgUpdate{}
	for id, up := range u.updates {
		if id < offset && !u.stored[id] {
			open[id] = up
		}
	}
	u.mu.Unlock()
	if len(open) == 0 {
		return
	}
	held, err := u.heldUpdates()
	if err != nil {
		return // PostgreSQL did not answer the test: nothing to tell
	}
	for id, up := range open {
		var n int64
		if err := u.db.Raw(`SELECT count(*) FROM messages WHERE role = 'user' AND content = ?`, up.text).Scan(&n).Error; err != nil {
			continue
		}
		if n == 0 && held[id] {
			continue
		}
		u.mu.Lock()
		u.stored[id] = true // or reported: once
		if n == 0 {
			u.early = append(u.early, tgEarly{chat: up.chat, what: fmt.Sprintf(
				"getUpdates with offset %d confirmed update %d (%q), whose message is neither stored nor held in the stored offset state", offset, id, up.text)})
		}
		u.mu.Unlock()
	}
}

// polls counts the getUpdates calls from since to until and returns the
// highest offset they asked with.
func (u *tgOutageUsers) polls(since, until time.Time) (n, highest int) {
	for _, c := range u.api.Calls("getUpdates") {
		if c.At.Before(since) || c.At.After(until) {
			continue
		}
		n++
		offset, _ := strconv.Atoi(c.Params.Get("offset"))
		highest = max(highest, offset)
	}
	return n, highest
}

// lowestOpen is the lowest id of an update pushed whose message is
// neither stored nor held in the bot's stored offset state (or one past
// the last update, if there is none).
func (u *tgOutageUsers) lowestOpen() (int, error) {
	u.mu.Lock()
	updates := maps.Clone(u.updates)
	u.mu.Unlock()
	held, err := u.heldUpdates()
	if err != nil {
		return 0, err
	}
	lowest := u.api.LastUpdateID() + 1
	for id, up := range updates {
		if held[id] {
			continue
		}
		var n int64
		if err := u.db.Raw(`SELECT count(*) FROM messages WHERE role = 'user' AND content = ?`, up.text).Scan(&n).Error; err != nil {
			return 0, err
		}
		if n == 0 {
			lowest = min(lowest, id)
		}
	}
	return lowest, nil
}

// heldUpdates reads the ids of the updates the bot's stored offset state
// holds (bots/telegram offsetState).
func (u *tgOutageUsers) heldUpdates() (map[int]bool, error) {
	var values []string
	if err := u.db.Raw(`SELECT value FROM channel_states WHERE name LIKE 'telegram:%:offset'`).Scan(&values).Error; err != nil {
		return nil, err
	}
	held := map[int]bool{}
	for _, v := range values {
		var st struct {
			Held []struct {
				Update struct {
					UpdateID int `json:"update_id"`
				} `json:"update"`
			} `json:"held"`
		}
		if err := json.Unmarshal([]byte(v), &st); err != nil {
			return nil, fmt.Errorf("stored offset state %q: %w", v, err)
		}
		for _, h := range st.Held {
			held[h.Update.UpdateID] = true
		}
	}
	return held, nil
}

// handedOut counts the updates of a getUpdates answer, each one's
// second and later times as handed out again.
func (u *tgOutageUsers) handedOut(body []byte) {
	var res struct {
		Result []struct {
			UpdateID int `json:"update_id"`
		} `json:"result"`
	}
	json.Unmarshal(body, &res)
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, up := range res.Result {
		if u.handed[up.UpdateID]++; u.handed[up.UpdateID] == 2 {
			u.again++
		}
	}
}

func (u *tgOutageUsers) answers() map[string][]time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := map[string][]time.Time{}
	for _, s := range u.sends {
		for _, text := range answeredBy(s.text) {
			out[text] = append(out[text], s.at)
		}
	}
	return out
}

// notices counts the delay notices sent to user i's chat; each must
// answer a message of that chat.
func (u *tgOutageUsers) notices(m string, i int) int {
	chat := u.chat(m, i)
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, s := range u.sends {
		if s.chat == chat && s.text == sessions.DelayText {
			n++
		}
	}
	return n
}

// problems lists, for moment m's chats, the updates whose offset was
// confirmed before their message was stored, and the delay notices that
// do not answer a message of their chat.
func (u *tgOutageUsers) problems(m string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for i := range outageUsers {
		chat := u.chat(m, i)
		for _, e := range u.early {
			if e.chat == chat {
				out = append(out, e.what)
			}
		}
		for _, s := range u.sends {
			if s.chat == chat && s.text == sessions.DelayText && !slices.Contains(u.msgs[chat], s.replyTo) {
				out = append(out, fmt.Sprintf("the delay notice to chat %d answers message %d, not one of the chat's %v", chat, s.replyTo, u.msgs[chat]))
			}
		}
	}
	return out
}

func (u *tgOutageUsers) stats() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	again := u.again
	u.again = 0
	return fmt.Sprintf("; getUpdates handed out %d updates more than once (the offset held them)", again)
}

// dropConnections does nothing: a Telegram user's connection is
// Telegram's, and the bot's to the Bot API does not go through the
// database.
func (u *tgOutageUsers) dropConnections(string) {}

func (u *tgOutageUsers) armDelivery(m string, cut func()) {
	h := &tgHold{chats: map[int64]bool{}, seen: map[int64]bool{}, cut: cut, done: make(chan struct{})}
	for i := range outageUsers {
		h.chats[u.chat(m, i)] = true
	}
	u.mu.Lock()
	u.hold = h
	u.mu.Unlock()
}

func (u *tgOutageUsers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/getUpdates") {
		r.ParseForm()
		offset, _ := strconv.Atoi(r.FormValue("offset"))
		u.checkOffset(offset)
		rec := httptest.NewRecorder()
		u.api.ServeHTTP(rec, r)
		u.handedOut(rec.Body.Bytes())
		copyResponse(w, rec)
		return
	}
	if !strings.HasSuffix(r.URL.Path, "/sendMessage") {
		u.api.ServeHTTP(w, r)
		return
	}
	r.ParseForm()
	chat, _ := strconv.ParseInt(r.FormValue("chat_id"), 10, 64)
	rec := httptest.NewRecorder()
	u.api.ServeHTTP(rec, r)
	u.mu.Lock()
	if rec.Code == http.StatusOK {
		replyTo, _ := strconv.Atoi(r.FormValue("reply_to_message_id"))
		u.sends = append(u.sends, tgSend{chat: chat, text: r.FormValue("text"), replyTo: replyTo, at: time.Now()})
	}
	h := u.hold
	held := h != nil && h.chats[chat] && !h.seen[chat]
	all := false
	if held {
		h.seen[chat] = true
		if all = len(h.seen) == len(h.chats); all {
			u.hold = nil
		}
	}
	u.mu.Unlock()
	if held {
		if all {
			h.fire() // every reply is sent; the database goes before any mark
		}
		select {
		case <-h.done:
		case <-time.After(20 * time.Second):
			h.fire()
		}
	}
	copyResponse(w, rec)
}

// copyResponse writes what rec recorded to w.
func copyResponse(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

// wsOutageUsers are the moments' WebSocket users, each a client that keeps
// every message until its ack, reconnects with the web page's backoff
// and then resends what was not acknowledged, with the same id.
type wsOutageUsers struct {
	addr  string
	mu    sync.Mutex
	users map[string]*wsOutageUser
	// armed: the moment whose first reply frame runs cut.
	armed string
	cut   func()

	resent, reconnects, resentOnReady, fromHistory atomic.Int64
}

func (ws *wsOutageUsers) name(m string, i int) string { return fmt.Sprintf("%s-u%d", m, i) }

func (ws *wsOutageUsers) key(m string, i int) string { return "websocket:" + ws.name(m, i) }

// client returns user i of moment m's client, started on first use.
func (ws *wsOutageUsers) client(m string, i int) *wsOutageUser {
	name := ws.name(m, i)
	ws.mu.Lock()
	defer ws.mu.Unlock()
	u := ws.users[name]
	if u == nil {
		u = &wsOutageUser{all: ws, name: name, texts: map[string]string{}, retry: map[string]time.Duration{},
			replies: map[string]map[int64]time.Time{}, stop: make(chan struct{}), backoff: 500 * time.Millisecond}
		ws.users[name] = u
		go u.run()
	}
	return u
}

func (ws *wsOutageUsers) send(t *testing.T, m string, i int, text string) {
	ws.client(m, i).send(text)
}

// join connects user i of moment m and waits for its ready.
func (ws *wsOutageUsers) join(t *testing.T, m string, i int) {
	t.Helper()
	u := ws.client(m, i)
	if !waitUntil(10*time.Second, func() bool { _, ok := u.online(); return ok }) {
		t.Fatalf("%s did not connect", u.name)
	}
}

func (ws *wsOutageUsers) online(m string, i int) (time.Time, bool) {
	if u := ws.user(m, i); u != nil {
		return u.online()
	}
	return time.Time{}, false
}

func (ws *wsOutageUsers) answers() map[string][]time.Time {
	ws.mu.Lock()
	users := make([]*wsOutageUser, 0, len(ws.users))
	for _, u := range ws.users {
		users = append(users, u)
	}
	ws.mu.Unlock()
	out := map[string][]time.Time{}
	for _, u := range users {
		u.mu.Lock()
		for text, seqs := range u.replies {
			for _, at := range seqs {
				out[text] = append(out[text], at)
			}
		}
		u.mu.Unlock()
	}
	for _, as := range out {
		slices.SortFunc(as, time.Time.Compare)
	}
	return out
}

func (ws *wsOutageUsers) stats() string {
	return fmt.Sprintf("; clients resent %d messages after an `internal` error, reconnected %d times, resent %d messages after reconnecting, "+
		"and had %d messages answered first in ready.history", ws.resent.Swap(0), ws.reconnects.Swap(0), ws.resentOnReady.Swap(0), ws.fromHistory.Swap(0))
}

func (ws *wsOutageUsers) user(m string, i int) *wsOutageUser {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.users[ws.name(m, i)]
}

func (ws *wsOutageUsers) notices(m string, i int) int {
	u := ws.user(m, i)
	if u == nil {
		return 0
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.notices
}

// problems lists the delay notices to moment m's users that named no
// message of theirs, or said something else than sessions.DelayText.
func (ws *wsOutageUsers) problems(m string) []string {
	var out []string
	for i := range outageUsers {
		if u := ws.user(m, i); u != nil {
			u.mu.Lock()
			out = append(out, u.wrong...)
			u.mu.Unlock()
		}
	}
	return out
}

// dropConnections closes the connections of moment m's even users.
func (ws *wsOutageUsers) dropConnections(m string) {
	for i := 0; i < outageUsers; i += 2 {
		ws.mu.Lock()
		u := ws.users[ws.name(m, i)]
		ws.mu.Unlock()
		if u != nil {
			u.drop()
		}
	}
}

func (ws *wsOutageUsers) armDelivery(m string, cut func()) {
	ws.mu.Lock()
	ws.armed, ws.cut = m, cut
	ws.mu.Unlock()
}

// replied is told of each reply frame user name gets.
func (ws *wsOutageUsers) replied(name string) {
	ws.mu.Lock()
	cut := ws.cut
	if cut == nil || !strings.HasPrefix(name, ws.armed+"-") {
		ws.mu.Unlock()
		return
	}
	ws.cut = nil
	ws.mu.Unlock()
	cut()
}

func (ws *wsOutageUsers) close() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, u := range ws.users {
		u.close()
	}
}

// wsOutageUser is one WebSocket user's client, as the web page behaves: a
// message is kept until its ack and resent with the same id after each
// reconnect; an `internal` error for it (it could not be stored) resends
// it after a pause, as the protocol asks.
type wsOutageUser struct {
	all  *wsOutageUsers
	name string

	mu      sync.Mutex
	conn    *websocket.Conn // nil while disconnected
	readyAt time.Time       // when conn got its ready
	lostAt  time.Time       // when the last connection ended
	session string
	conv    string
	lastSeq int64
	readies int // ready frames so far: connections made
	backoff time.Duration
	nextID  int
	texts   map[string]string // client id → text
	pending []string          // ids sent and not acknowledged, oldest first
	retry   map[string]time.Duration
	replies map[string]map[int64]time.Time // text → seq of each reply answering it → first seen
	notices int                            // notice frames with code delayed
	wrong   []string                       // what was wrong with them
	closed  bool
	stop    chan struct{}
}

func (u *wsOutageUser) send(text string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.nextID++
	id := fmt.Sprintf("c-%d", u.nextID)
	u.texts[id] = text
	u.pending = append(u.pending, id)
	u.write(id)
}

// write sends message id on the connection, if there is one. Called
// under u.mu, which keeps writes one at a time.
func (u *wsOutageUser) write(id string) {
	if u.conn != nil {
		u.conn.WriteJSON(map[string]any{"type": "message", "id": id, "text": u.texts[id]})
	}
}

func (u *wsOutageUser) close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.closed {
		u.closed = true
		close(u.stop)
		if u.conn != nil {
			u.conn.Close()
		}
	}
}

// run connects, serves the connection until it ends, and reconnects
// after 0.5 s doubling to 10 s, with jitter — the web page's backoff.
func (u *wsOutageUser) run() {
	for {
		if c, _, err := websocket.DefaultDialer.Dial("ws://"+u.all.addr+"/ws", nil); err == nil {
			u.serve(c)
		}
		u.mu.Lock()
		if !u.closed {
			u.all.reconnects.Add(1)
		}
		wait := time.Duration(float64(u.backoff) * (0.75 + rand.Float64()/2))
		u.backoff = min(2*u.backoff, 10*time.Second)
		u.mu.Unlock()
		select {
		case <-u.stop:
			return
		case <-time.After(wait):
		}
	}
}

func (u *wsOutageUser) serve(c *websocket.Conn) {
	defer c.Close()
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return
	}
	hello := map[string]any{"type": "hello", "user": u.name}
	if u.session != "" {
		hello["session"], hello["last_seq"], hello["conversation"] = u.session, u.lastSeq, u.conv
	}
	err := c.WriteJSON(hello)
	u.mu.Unlock()
	if err != nil {
		return
	}
	defer func() {
		u.mu.Lock()
		if u.conn == c {
			u.conn, u.lostAt = nil, time.Now()
		}
		u.mu.Unlock()
	}()
	for {
		var f struct {
			Type    string
			Session string
			Conv    string `json:"conversation"`
			ID      string
			Seq     int64
			Text    string
			Code    string
			ReplyTo string `json:"reply_to"`
			Covers  []string
			Status  string
			Message string
			Resumed bool
			History []struct {
				Seq  int64
				Role string
				Text string
			}
		}
		if err := c.ReadJSON(&f); err != nil {
			return
		}
		replied := false
		u.mu.Lock()
		switch f.Type {
		case "ready":
			u.conn, u.backoff, u.readyAt = c, 500*time.Millisecond, time.Now()
			if f.Conv != u.conv {
				u.lastSeq = 0
			}
			u.session, u.conv = f.Session, f.Conv
			for _, h := range f.History {
				if h.Role == "assistant" {
					u.all.fromHistory.Add(int64(u.answered(answeredBy(h.Text), h.Seq)))
				}
				u.lastSeq = max(u.lastSeq, h.Seq)
			}
			if u.readies++; u.readies > 1 {
				u.all.resentOnReady.Add(int64(len(u.pending)))
			}
			for _, id := range u.pending {
				u.write(id)
			}
		case "ack":
			u.pending = slices.DeleteFunc(u.pending, func(id string) bool { return id == f.ID })
			delete(u.retry, f.ID)
			u.lastSeq = max(u.lastSeq, f.Seq)
		case "reply":
			ids := f.Covers
			if len(ids) == 0 {
				ids = []string{f.ReplyTo}
			}
			var texts []string
			for _, id := range ids {
				texts = append(texts, u.texts[id])
			}
			u.answered(texts, f.Seq)
			u.lastSeq = max(u.lastSeq, f.Seq)
			replied = f.Status == "ok"
		case "notice":
			if f.Code != "delayed" {
				break
			}
			u.notices++
			if _, ok := u.texts[f.ID]; !ok || f.Message != sessions.DelayText {
				u.wrong = append(u.wrong, fmt.Sprintf("%s had a delay notice about %q (the client's ids go to c-%d): %q", u.name, f.ID, u.nextID, f.Message))
			}
		case "error":
			if f.Code == "internal" && slices.Contains(u.pending, f.ID) {
				// Not stored: resend it after a pause, longer each time.
				pause := max(u.retry[f.ID], 250*time.Millisecond) * 2
				u.retry[f.ID] = min(pause, 10*time.Second)
				id := f.ID
				time.AfterFunc(time.Duration(float64(pause)*(0.75+rand.Float64()/2)), func() {
					u.mu.Lock()
					defer u.mu.Unlock()
					if slices.Contains(u.pending, id) {
						u.all.resent.Add(1)
						u.write(id)
					}
				})
			}
		}
		u.mu.Unlock()
		if replied {
			u.all.replied(u.name)
		}
	}
}

// answered records that reply seq answers texts, and returns how many
// of them it is the first answer of. Called under u.mu.
func (u *wsOutageUser) answered(texts []string, seq int64) (first int) {
	for _, s := range texts {
		if s == "" {
			continue
		}
		if u.replies[s] == nil {
			u.replies[s] = map[int64]time.Time{}
			first++
		}
		if _, ok := u.replies[s][seq]; !ok {
			u.replies[s][seq] = time.Now()
		}
	}
	return first
}

// online reports whether the client is connected, and since when it is
// connected or not.
func (u *wsOutageUser) online() (since time.Time, ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.conn != nil {
		return u.readyAt, true
	}
	return u.lostAt, false
}

// drop closes the connection, as a lost network does.
func (u *wsOutageUser) drop() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.conn != nil {
		u.conn.NetConn().Close()
	}
}
