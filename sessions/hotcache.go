package sessions

import (
	"container/list"
	"sync"
	"unsafe"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// DefaultCacheBytes is Options.CacheBytes' default.
const DefaultCacheBytes = 64 << 20

// Fixed overheads of the cache's estimate: a conversation's row, its map
// entry and list element; each message's struct.
const (
	hotConvOverhead = int64(unsafe.Sizeof(hotConv{})) + 256
	messageSize     = int64(unsafe.Sizeof(ledger.Message{}))
)

// estimate is what a cached conversation holds in memory, roughly: its
// fixed parts, and each message's struct and text.
// It is computed by the holder of the session key's lock (who alone
// changes the window). The messages' texts are counted once: estimate
// adds those pushed since it last ran (every turn's two pushes walked
// the whole window before), and counts them all again after the window
// moved to its front or was replaced.
func (h *hotConv) estimate() int64 {
	if len(h.window) < h.sized {
		h.sized, h.textBytes = 0, 0
	}
	for i := h.sized; i < len(h.window); i++ {
		m := &h.window[i]
		h.textBytes += int64(len(m.ConversationID) + len(m.Role) + len(m.Content) + len(m.ToolCalls) + len(m.ToolCallID) +
			len(m.Status) + len(m.Error) + len(m.TurnState) + len(m.TurnOwner) + len(m.DeliveryRef))
		if m.ClientMsgID != nil {
			h.textBytes += int64(len(*m.ClientMsgID)) + 16
		}
	}
	h.sized = len(h.window)
	return hotConvOverhead + int64(len(h.conv.ID)+len(h.conv.SessionKey)+len(h.conv.UserID)+len(h.conv.ChatID)) +
		int64(len(h.window))*messageSize + h.textBytes
}

// hotCache holds active conversations, least recently used dropped first
// when it has more than maxEntries of them or their estimated bytes pass
// maxBytes. Dropping one is always safe: the store is the truth, and the
// next load of its key reads it again. A holder still using a dropped
// conversation keeps its pointer and finishes with it; its later growth
// is then not counted (Update ignores an entry no longer cached).
type hotCache struct {
	maxEntries int
	maxBytes   int64

	mu    sync.Mutex
	ll    *list.List // front: most recently used
	items map[string]*list.Element
	bytes int64
}

type hotEntry struct {
	key  string
	hc   *hotConv
	size int64
}

func newHotCache(maxEntries int, maxBytes int64) *hotCache {
	return &hotCache{maxEntries: maxEntries, maxBytes: maxBytes, ll: list.New(), items: map[string]*list.Element{}}
}

// Get returns the key's conversation and marks it used.
func (c *hotCache) Get(key string) (*hotConv, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.ll.MoveToFront(el)
		return el.Value.(*hotEntry).hc, true
	}
	return nil, false
}

// Add caches hc as the key's conversation. Call it holding the key's lock.
func (c *hotCache) Add(key string, hc *hotConv) {
	size := hc.estimate()
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		e := el.Value.(*hotEntry)
		c.bytes += size - e.size
		e.hc, e.size = hc, size
		c.ll.MoveToFront(el)
	} else {
		c.items[key] = c.ll.PushFront(&hotEntry{key: key, hc: hc, size: size})
		c.bytes += size
	}
	c.evictLocked()
}

// Update counts hc's grown window, if hc is still the key's cached
// conversation. Call it holding the key's lock, after changing the window.
func (c *hotCache) Update(key string, hc *hotConv) {
	size := hc.estimate()
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok || el.Value.(*hotEntry).hc != hc {
		return
	}
	e := el.Value.(*hotEntry)
	c.bytes += size - e.size
	e.size = size
	c.evictLocked()
}

// Remove drops the key's conversation.
func (c *hotCache) Remove(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.removeLocked(el)
	}
}

func (c *hotCache) removeLocked(el *list.Element) {
	e := el.Value.(*hotEntry)
	c.ll.Remove(el)
	delete(c.items, e.key)
	c.bytes -= e.size
}

func (c *hotCache) evictLocked() {
	for c.ll.Len() > 0 && (c.ll.Len() > c.maxEntries || c.bytes > c.maxBytes) {
		c.removeLocked(c.ll.Back())
	}
}

// Len is how many conversations are cached.
func (c *hotCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}

// Bytes is the cached conversations' estimated size.
func (c *hotCache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// hotConv is an active conversation with the tail of its messages. It is
// read and changed only by the holder of its session key's lock.
type hotConv struct {
	conv   ledger.Conversation
	window []ledger.Message
	cap    int
	// sized is how many of window's messages textBytes counts
	// (estimate); push and reset start it over.
	sized     int
	textBytes int64
}

// reset replaces the conversation and its window, read from storage.
func (h *hotConv) reset(conv ledger.Conversation, window []ledger.Message) {
	h.conv, h.window = conv, window
	h.sized, h.textBytes = 0, 0
}

// push adds messages to the window. The window grows to twice its cap
// before the newest cap messages move to the front, so a turn copies and
// allocates nothing in the steady state. The window is only read under the
// session key's lock, never kept past it.
func (h *hotConv) push(msgs ...ledger.Message) {
	if len(h.window)+len(msgs) > 2*h.cap && len(h.window) > 0 {
		keep := max(h.cap-len(msgs), 0)
		n := copy(h.window, h.window[max(len(h.window)-keep, 0):])
		clear(h.window[n:])
		h.window = h.window[:n]
		h.sized, h.textBytes = 0, 0
	}
	if h.window == nil {
		h.window = make([]ledger.Message, 0, 2*h.cap)
	}
	h.window = append(h.window, msgs...)
}

func (h *hotConv) byClientID(id string) *ledger.Message {
	for i := len(h.window) - 1; i >= 0; i-- {
		if m := &h.window[i]; m.ClientMsgID != nil && *m.ClientMsgID == id {
			return m
		}
	}
	return nil
}

// windowCap is how many recent messages a hot conversation keeps: the
// history window plus room for messages History leaves out — with
// compaction, the summaries among them too (one a turn at most).
func windowCap(p Policy) int {
	n := p.MaxHistory + 16 + p.Busy.withDefaults().MaxBatch
	if p.Compaction.Enabled {
		n += p.MaxHistory/2 + 1
	}
	return n
}
