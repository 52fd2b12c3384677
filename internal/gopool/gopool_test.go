package gopool

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// waitFor polls until cond holds, failing after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

// runAtOnce runs n works on p that all run at the same time, so that p
// starts n goroutines, and returns once all of them are done.
func runAtOnce(p *Pool, n int) {
	release := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(n)
	for range n {
		p.Go(func() { <-release; wg.Done() })
	}
	close(release)
	wg.Wait()
}

// trimSet reports whether p has a trim to come.
func trimSet(p *Pool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.timer != nil
}

func TestAWaitingGoroutineRunsTheNextWork(t *testing.T) {
	p := New(time.Hour)
	done := make(chan struct{})
	p.Go(func() { close(done) })
	<-done
	waitFor(t, "the goroutine to wait for work", func() bool { return p.Waiting() == 1 })

	done = make(chan struct{})
	p.Go(func() { close(done) })
	if n := p.Waiting(); n != 0 {
		t.Fatalf("after Go, %d goroutines wait; want the one waiting to have taken the work", n)
	}
	<-done
	// The same goroutine waits again: a second one would make it 2.
	waitFor(t, "the goroutine to wait again", func() bool { return p.Waiting() == 1 })
}

func TestGoNeverBlocks(t *testing.T) {
	p := New(time.Hour)
	const n = 1000
	runAtOnce(p, n)
	waitFor(t, "every goroutine to wait", func() bool { return p.Waiting() == n })

	// Each waiting goroutine takes one work; none runs two at once.
	var mu sync.Mutex
	running, most := 0, 0
	release := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(n)
	for range n {
		p.Go(func() {
			mu.Lock()
			running++
			most = max(most, running)
			mu.Unlock()
			<-release
			mu.Lock()
			running--
			mu.Unlock()
			wg.Done()
		})
	}
	if got := p.Waiting(); got != 0 {
		t.Fatalf("%d goroutines still wait with %d works handed out", got, n)
	}
	waitFor(t, "all works to run", func() bool { mu.Lock(); defer mu.Unlock(); return running == n })
	close(release)
	wg.Wait()
	if most != n {
		t.Fatalf("at most %d works ran at once; want %d", most, n)
	}
}

func TestTrimLetsGoOfWhatWaitedThroughTheInterval(t *testing.T) {
	p := New(time.Hour) // trims by hand below
	runAtOnce(p, 3)
	waitFor(t, "three goroutines to wait", func() bool { return p.Waiting() == 3 })
	// The interval began when the first of them waited: the other two
	// came during it.
	p.trimIdle()
	if n := p.Waiting(); n != 2 {
		t.Fatalf("after the first trim, %d wait; want the 2 that came during the interval", n)
	}

	// One of the two works again during the next interval: it is the one
	// kept.
	done := make(chan struct{})
	p.Go(func() { close(done) })
	<-done
	waitFor(t, "it to wait again", func() bool { return p.Waiting() == 2 })
	p.trimIdle()
	if n := p.Waiting(); n != 1 {
		t.Fatalf("after a trim, %d wait; want the 1 that worked during the interval", n)
	}
	p.trimIdle()
	if n := p.Waiting(); n != 0 {
		t.Fatalf("after a trim with no work, %d wait; want none", n)
	}
	if trimSet(p) {
		t.Fatal("the trim timer is still set with none waiting")
	}

	// The pool starts again from nothing.
	done = make(chan struct{})
	p.Go(func() { close(done) })
	<-done
	waitFor(t, "a new goroutine to wait", func() bool { return p.Waiting() == 1 })
}

func TestIdleGoroutinesExitOnTheirOwn(t *testing.T) {
	p := New(5 * time.Millisecond)
	runAtOnce(p, 20)
	waitFor(t, "the idle goroutines to be let go", func() bool { return p.Waiting() == 0 })
	if trimSet(p) {
		t.Fatal("the trim timer is still set with none waiting")
	}
}

// A panic in the work ends the process, as on a goroutine of its own.
func TestAPanicIsNotRecovered(t *testing.T) {
	if os.Getenv("GOPOOL_PANIC") == "1" {
		done := make(chan struct{})
		Go(func() { close(done) })
		<-done
		Go(func() { panic("boom in pooled work") })
		select {} // the panic ends the process
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAPanicIsNotRecovered$")
	cmd.Env = append(os.Environ(), "GOPOOL_PANIC=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the process survived a panic in pooled work:\n%s", out)
	}
	if !strings.Contains(string(out), "panic: boom in pooled work") {
		t.Fatalf("the process did not end with the work's panic:\n%s", out)
	}
}
