package store

import (
	"sync"
	"sync/atomic"

	"github.com/ncruces/go-sqlite3/vfs"
)

// SQLite writes a commit to the write-ahead log a frame at a time, and a
// frame in two writes: its 24-byte header, then the page. A batch of
// appends dirties about a page per row (messages are clustered by
// conversation), so a commit of a few hundred rows was a few hundred
// pwrite calls before its fsync. The embedded store opens its files
// through the VFS below: the operating system's, except that a log's
// frames written back to back are gathered in memory and reach the file
// in one write, at the latest when SQLite syncs the log — which it does
// at every commit (synchronous=FULL, sqliteDSN), before the commit is
// published in the log's index, so no other connection can look for a
// frame that is not in the file yet.
//
// Anything else that touches the log's file (a read, its size, a
// truncation, closing it) writes what was gathered first, and a write
// that does not continue the gathered bytes writes them first too: the
// file reads as SQLite wrote it at every call SQLite can observe. A
// failed write is reported by the call that made it: the sync, which
// fails the commit as a failed fsync would.

// sqliteVFSName is the VFS the embedded store opens its files with.
const sqliteVFSName = "chatgate"

// walGatherMax bounds what a log file holds before it writes: a large
// transaction spilling pages writes in pieces of this size.
const walGatherMax = 1 << 20

func init() {
	vfs.Register(sqliteVFSName, gatherVFS{})
}

// gatherVFS is the operating system's VFS with its log files wrapped.
type gatherVFS struct{}

func (gatherVFS) osVFS() vfs.VFSFilename { return vfs.Find("os").(vfs.VFSFilename) }

// Open is what the library calls only when OpenFilename is missing; it
// answers as the operating system's VFS does.
func (v gatherVFS) Open(name string, flags vfs.OpenFlag) (vfs.File, vfs.OpenFlag, error) {
	f, out, err := vfs.Find("os").Open(name, flags)
	return gather(f, flags, out, err)
}

func (v gatherVFS) OpenFilename(name *vfs.Filename, flags vfs.OpenFlag) (vfs.File, vfs.OpenFlag, error) {
	f, out, err := v.osVFS().OpenFilename(name, flags)
	return gather(f, flags, out, err)
}

// logsGathered counts the write-ahead logs opened through gatherVFS.
var logsGathered atomic.Int64

// gather wraps an opened write-ahead log.
func gather(f vfs.File, flags, out vfs.OpenFlag, err error) (vfs.File, vfs.OpenFlag, error) {
	if err != nil || flags&vfs.OPEN_WAL == 0 {
		return f, out, err
	}
	logsGathered.Add(1)
	return &gatherFile{File: f}, out, nil
}

func (v gatherVFS) Delete(name string, syncDir bool) error {
	return vfs.Find("os").Delete(name, syncDir)
}

func (v gatherVFS) Access(name string, flags vfs.AccessFlag) (bool, error) {
	return vfs.Find("os").Access(name, flags)
}

func (v gatherVFS) FullPathname(name string) (string, error) {
	return vfs.Find("os").FullPathname(name)
}

// gatherFile is a write-ahead log whose consecutive writes are gathered.
// SQLite calls a file's methods one at a time (its connection's mutex);
// the lock keeps that true of anything else.
type gatherFile struct {
	vfs.File

	mu  sync.Mutex
	buf []byte // gathered bytes, to be written at off
	off int64
}

var _ vfs.FileUnwrap = (*gatherFile)(nil)

func (f *gatherFile) Unwrap() vfs.File { return f.File }

func (f *gatherFile) WriteAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.buf) > 0 && off != f.off+int64(len(f.buf)) {
		if err := f.flushLocked(); err != nil {
			return 0, err
		}
	}
	if len(f.buf)+len(p) > walGatherMax {
		if err := f.flushLocked(); err != nil {
			return 0, err
		}
		if len(p) >= walGatherMax {
			return f.File.WriteAt(p, off)
		}
	}
	if len(f.buf) == 0 {
		f.off = off
	}
	f.buf = append(f.buf, p...)
	return len(p), nil
}

// flushLocked writes what was gathered. The buffer is kept for the next
// commit's frames.
func (f *gatherFile) flushLocked() error {
	if len(f.buf) == 0 {
		return nil
	}
	_, err := f.File.WriteAt(f.buf, f.off)
	f.buf = f.buf[:0]
	return err
}

func (f *gatherFile) flush() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.flushLocked()
}

func (f *gatherFile) Sync(flags vfs.SyncFlag) error {
	if err := f.flush(); err != nil {
		return err
	}
	return f.File.Sync(flags)
}

func (f *gatherFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.flush(); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *gatherFile) Size() (int64, error) {
	if err := f.flush(); err != nil {
		return 0, err
	}
	return f.File.Size()
}

func (f *gatherFile) Truncate(size int64) error {
	if err := f.flush(); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

func (f *gatherFile) SizeHint(size int64) error {
	if err := f.flush(); err != nil {
		return err
	}
	if h, ok := f.File.(vfs.FileSizeHint); ok {
		return h.SizeHint(size)
	}
	return nil
}

func (f *gatherFile) Close() error {
	err := f.flush()
	f.mu.Lock()
	f.buf = nil
	f.mu.Unlock()
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	return err
}
