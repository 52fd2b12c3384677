package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/ncruces/go-sqlite3/vfs"
)

// osLog is a log file on disk that counts the writes reaching it and can
// be made to fail them.
type osLog struct {
	*os.File
	writes  int
	failing error
}

func (f *osLog) WriteAt(p []byte, off int64) (int, error) {
	if f.failing != nil {
		return 0, f.failing
	}
	f.writes++
	return f.File.WriteAt(p, off)
}

func (f *osLog) Size() (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}
func (f *osLog) Sync(vfs.SyncFlag) error                         { return f.File.Sync() }
func (f *osLog) Lock(vfs.LockLevel) error                        { return nil }
func (f *osLog) Unlock(vfs.LockLevel) error                      { return nil }
func (f *osLog) CheckReservedLock() (bool, error)                { return false, nil }
func (f *osLog) SectorSize() int                                 { return 4096 }
func (f *osLog) DeviceCharacteristics() vfs.DeviceCharacteristic { return 0 }

func newGatherLog(t *testing.T) (*gatherFile, *osLog, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "db-wal")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	inner := &osLog{File: f}
	g := &gatherFile{File: inner}
	t.Cleanup(func() { g.Close() })
	return g, inner, path
}

// frame is a log frame as SQLite writes it: a header, then the page.
func writeFrame(t *testing.T, g *gatherFile, off int64, fill byte) {
	t.Helper()
	if _, err := g.WriteAt(bytes.Repeat([]byte{fill}, 24), off); err != nil {
		t.Fatal(err)
	}
	if _, err := g.WriteAt(bytes.Repeat([]byte{fill + 1}, 4096), off+24); err != nil {
		t.Fatal(err)
	}
}

func TestLogFramesReachTheFileInOneWriteAtSync(t *testing.T) {
	g, inner, path := newGatherLog(t)
	for i := range 10 {
		writeFrame(t, g, 32+int64(i)*4120, byte(2*i))
	}
	if inner.writes != 0 {
		t.Fatalf("%d writes before the sync; want none", inner.writes)
	}
	if err := g.Sync(vfs.SYNC_NORMAL); err != nil {
		t.Fatal(err)
	}
	if inner.writes != 1 {
		t.Fatalf("%d writes for 10 frames; want 1", inner.writes)
	}
	got, _ := os.ReadFile(path)
	if len(got) != 32+10*4120 {
		t.Fatalf("file is %d bytes; want %d", len(got), 32+10*4120)
	}
	for i := range 10 {
		off := 32 + i*4120
		if got[off] != byte(2*i) || got[off+24] != byte(2*i+1) || got[off+4119] != byte(2*i+1) {
			t.Fatalf("frame %d reads back wrong", i)
		}
	}
	// The next commit starts a new gathering.
	writeFrame(t, g, 32+10*4120, 100)
	if err := g.Sync(vfs.SYNC_NORMAL); err != nil {
		t.Fatal(err)
	}
	if inner.writes != 2 {
		t.Fatalf("%d writes after a second commit; want 2", inner.writes)
	}
}

func TestLogReadsSizesAndOtherWritesSeeGatheredBytes(t *testing.T) {
	g, inner, _ := newGatherLog(t)
	writeFrame(t, g, 32, 7)
	if n, err := g.Size(); err != nil || n != 32+4120 {
		t.Fatalf("size %d, %v; want %d", n, err, 32+4120)
	}
	writeFrame(t, g, 32+4120, 9)
	page := make([]byte, 4096)
	if _, err := g.ReadAt(page, 32+4120+24); err != nil || page[0] != 10 || page[4095] != 10 {
		t.Fatalf("read of a gathered page: %v, first byte %d", err, page[0])
	}
	// A write that does not continue the gathered bytes lands after them:
	// rewriting the first frame's page wins over what was gathered.
	writeFrame(t, g, 32+2*4120, 11)
	if _, err := g.WriteAt(bytes.Repeat([]byte{42}, 4096), 32+24); err != nil {
		t.Fatal(err)
	}
	if _, err := g.ReadAt(page, 32+24); err != nil || page[0] != 42 {
		t.Fatalf("rewritten page reads %d, %v; want 42", page[0], err)
	}
	if err := g.Truncate(32 + 4120); err != nil {
		t.Fatal(err)
	}
	if n, _ := g.Size(); n != 32+4120 {
		t.Fatalf("size after truncate %d; want %d", n, 32+4120)
	}
	before := inner.writes
	if err := g.Sync(vfs.SYNC_NORMAL); err != nil || inner.writes != before {
		t.Fatalf("sync with nothing gathered: %v, %d writes", err, inner.writes-before)
	}
}

func TestAFailedLogWriteFailsTheSync(t *testing.T) {
	g, inner, path := newGatherLog(t)
	writeFrame(t, g, 32, 1)
	full := errors.New("no space left on device")
	inner.failing = full
	if err := g.Sync(vfs.SYNC_NORMAL); !errors.Is(err, full) {
		t.Fatalf("sync: %v; want the write's error", err)
	}
	inner.failing = nil
	if got, _ := os.ReadFile(path); len(got) != 0 {
		t.Fatalf("a failed commit left %d bytes in the log", len(got))
	}
	// What failed is not written later by another call.
	if n, err := g.Size(); err != nil || n != 0 {
		t.Fatalf("size %d, %v; want 0", n, err)
	}
}

func TestALargeTransactionIsWrittenInPieces(t *testing.T) {
	g, inner, path := newGatherLog(t)
	frames := 2*walGatherMax/4120 + 10
	for i := range frames {
		writeFrame(t, g, 32+int64(i)*4120, byte(i))
	}
	if err := g.Sync(vfs.SYNC_NORMAL); err != nil {
		t.Fatal(err)
	}
	if inner.writes < 3 || inner.writes > 4 {
		t.Fatalf("%d writes for %d frames; want 3 or 4 of at most %d bytes", inner.writes, frames, walGatherMax)
	}
	got, _ := os.ReadFile(path)
	if len(got) != 32+frames*4120 || got[32+(frames-1)*4120] != byte(frames-1) {
		t.Fatalf("log is %d bytes; want %d with the last frame's header", len(got), 32+frames*4120)
	}
}

func TestTheStoreOpensItsFilesThroughTheGatheringVFS(t *testing.T) {
	dsn := sqliteDSN(filepath.Join(t.TempDir(), "chatgate.db"), false)
	if !bytes.Contains([]byte(dsn), []byte("vfs="+sqliteVFSName)) {
		t.Fatalf("dsn %q does not name the %s VFS", dsn, sqliteVFSName)
	}
	own := sqliteDSN("file:x.db?vfs=memdb", false)
	if !bytes.Contains([]byte(own), []byte("vfs=memdb")) || bytes.Contains([]byte(own), []byte("vfs="+sqliteVFSName)) {
		t.Fatalf("dsn %q: an operator's vfs is kept", own)
	}
	if vfs.Find(sqliteVFSName) == nil {
		t.Fatalf("the %s VFS is not registered", sqliteVFSName)
	}
	// A store writes its log through it.
	before := logsGathered.Load()
	db := openStore(t, DriverSQLite, filepath.Join(t.TempDir(), "gathered.db"))
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	conv := &ledger.Conversation{ID: "c1", SessionKey: "websocket:u1", Channel: "websocket", Status: ledger.StatusActive,
		StartedAt: at, LastActivityAt: at, AgentName: "echo"}
	if err := db.CreateConversation(context.Background(), conv); err != nil {
		t.Fatal(err)
	}
	if logsGathered.Load() == before {
		t.Fatal("the store opened no write-ahead log through the gathering VFS")
	}
}
