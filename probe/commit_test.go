package probe

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// commits counts the commit probe's samples.
type commits struct{ n int }

func (c *commits) env() *Env {
	return &Env{Budget: Unlimited, Inflight: &Inflight{}, Observe: func(s Sample) {
		if s.Phase != PhaseCommit || s.Duration <= 0 {
			panic("not a commit sample, or a non-positive duration")
		}
		c.n++
	}}
}

// prepareCommit runs rounds until one commits, as the daemon's worker does: each round
// until the file is ready writes a step of it (or finishes it) and reports ErrNotPrepared.
func prepareCommit(t *testing.T, p *Commit, env *Env) (rounds int, res Result) {
	t.Helper()
	for rounds = 1; ; rounds++ {
		r, err := p.Round(context.Background(), env)
		res.Ops += r.Ops
		res.Bytes += r.Bytes
		if err == nil {
			return rounds, res
		}
		if !errors.Is(err, ErrNotPrepared) || rounds > 100 {
			t.Fatalf("round %d while filling the commit file: %v", rounds, err)
		}
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// changedPages are the indexes of the pages of size ps that differ between a and b.
func changedPages(a, b []byte, ps int) []int {
	var changed []int
	for i := 0; i+ps <= len(a); i += ps {
		if !bytes.Equal(a[i:i+ps], b[i:i+ps]) {
			changed = append(changed, i/ps)
		}
	}
	return changed
}

// What bbolt's commit does to its file, on a real one: the file is written in full once
// (no hole, header marked prepared) before the first commit; then each commit writes its
// pages at distinct offsets among the data pages and one meta page, the two meta pages
// taking turns, and is one sample.
func TestCommitFillsItsFileOnceThenWritesPagesAndAlternatingMetaPages(t *testing.T) {
	dir := t.TempDir()
	const size, pages = 12 << 20, 10
	p, err := NewCommit(CommitOptions{Dir: dir, Ops: 1, Pages: pages, FileSize: size})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var c commits
	rounds, res := prepareCommit(t, p, c.env())
	if rounds != 3 { // 8 MiB a round, then the rest; the first commit in a round of its own
		t.Errorf("filled and committed in %d rounds, want 3 (%d MiB in steps of %d MiB, then a commit)", rounds, size>>20, prepareChunk>>20)
	}
	ps := os.Getpagesize()
	fill := int64(size - HeaderSize)
	if want := (fill+FillBlock-1)/FillBlock + pages + 3; int64(res.Ops) != want || res.Bytes != fill+int64(pages+1)*int64(ps) || c.n != 1 {
		t.Errorf("filling and one commit: %+v, %d samples; want %d operations (fill writes, %d page writes, a meta page, two fdatasyncs), %d bytes, 1 sample",
			res, c.n, want, pages, fill+int64(pages+1)*int64(ps))
	}
	path := filepath.Join(dir, DirName, commitFileName)
	st := kernelState(t, path)
	if st.size != size || st.hole != size || st.header != (Header{File: "commit", Size: size, Prepared: true}) {
		t.Errorf("file: size %d, first hole at %d, header %+v; want %d bytes without a hole, prepared", st.size, st.hole, st.header, size)
	}
	if fi, _ := os.Lstat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}

	first := int((HeaderSize+ps-1)/ps + 2) // the first data page, after the header and two meta pages
	for commit := 1; commit <= 4; commit++ {
		before := readFile(t, path)
		c = commits{}
		res, err := p.Round(context.Background(), c.env())
		if err != nil {
			t.Fatal(err)
		}
		if res.Ops != pages+3 || res.Bytes != int64(pages+1)*int64(ps) || c.n != 1 {
			t.Errorf("commit %d: %+v, %d samples; want %d operations, %d bytes, 1 sample", commit, res, c.n, pages+3, (pages+1)*ps)
		}
		changed := changedPages(before, readFile(t, path), ps)
		// bbolt's meta page is txid % 2: this probe's first commit (txid 0) wrote
		// the first; the round's commit is txid `commit`.
		meta := first - 2 + commit%2
		if len(changed) != pages+1 || changed[0] != meta || changed[1] < first {
			t.Errorf("commit %d changed pages %v; want meta page %d and %d data pages from page %d", commit, changed, meta, pages, first)
		}
	}
}

// A restart takes the file the last run filled, as the read probe file is: a 128 MiB
// file is not written again at every start.
func TestCommitReusesItsFilledFileAfterARestart(t *testing.T) {
	dir := t.TempDir()
	opts := CommitOptions{Dir: dir, Ops: 2, Pages: 4, FileSize: 1 << 20}
	p, err := NewCommit(opts)
	if err != nil {
		t.Fatal(err)
	}
	prepareCommit(t, p, (&commits{}).env())
	must(t, p.Close())
	path := filepath.Join(dir, DirName, commitFileName)
	ino := kernelState(t, path).ino

	p, err = NewCommit(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var c commits
	if res, err := p.Round(context.Background(), c.env()); err != nil || c.n != 2 || res.Ops != 2*(4+3) {
		t.Fatalf("first round after a restart: %+v, %d commits, %v; want 2 commits at once", res, c.n, err)
	}
	if kernelState(t, path).ino != ino {
		t.Error("the filled file was replaced, not reused")
	}

	// Another size is another database: the file is filled again.
	opts.FileSize = 2 << 20
	q, err := NewCommit(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if rounds, _ := prepareCommit(t, q, (&commits{}).env()); rounds != 2 {
		t.Errorf("a 2 MiB file filled and committed in %d rounds, want 2: a step, then a commit", rounds)
	}
	if st := kernelState(t, path); st.size != 2<<20 || st.ino == ino {
		t.Errorf("after file_size changed: size %d, inode %d (was %d); want a new 2 MiB file", st.size, st.ino, ino)
	}
}

func TestCommitRefusesAFileThatIsNotOurs(t *testing.T) {
	t.Run("foreign file", func(t *testing.T) {
		dir := t.TempDir()
		must(t, os.Mkdir(filepath.Join(dir, DirName), 0o700))
		path := filepath.Join(dir, DirName, commitFileName)
		content := []byte("a database that is not ours\n")
		must(t, os.WriteFile(path, content, 0o600))
		p, err := NewCommit(CommitOptions{Dir: dir, Ops: 1, Pages: 1, FileSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		_, err = p.Round(context.Background(), (&commits{}).env())
		var foreign *ForeignFileError
		if !errors.As(err, &foreign) {
			t.Fatalf("round on a foreign file: %v, want a ForeignFileError", err)
		}
		if got, _ := os.ReadFile(path); !bytes.Equal(got, content) {
			t.Error("the foreign file was changed")
		}
	})
	t.Run("symlink", func(t *testing.T) {
		dir := t.TempDir()
		victim := filepath.Join(t.TempDir(), "victim")
		must(t, os.WriteFile(victim, []byte("do not write here"), 0o600))
		must(t, os.Mkdir(filepath.Join(dir, DirName), 0o700))
		must(t, os.Symlink(victim, filepath.Join(dir, DirName, commitFileName)))
		p, err := NewCommit(CommitOptions{Dir: dir, Ops: 1, Pages: 1, FileSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		_, err = p.Round(context.Background(), (&commits{}).env())
		var foreign *ForeignFileError
		if !errors.As(err, &foreign) {
			t.Fatalf("round on a symlink: %v, want a ForeignFileError", err)
		}
		if got, _ := os.ReadFile(victim); string(got) != "do not write here" {
			t.Error("the symlink was followed")
		}
	})
}

func TestCommitStopsUnderTheFreeSpaceFloor(t *testing.T) {
	dir := t.TempDir()
	free, err := FreeBytes(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewCommit(CommitOptions{Dir: dir, Ops: 1, Pages: 1, FileSize: 1 << 20, MinFree: free + 1<<40})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Round(context.Background(), (&commits{}).env()); !errors.Is(err, ErrLowFreeSpace) {
		t.Fatalf("got %v, want ErrLowFreeSpace", err)
	}
	if _, err := os.Stat(filepath.Join(dir, DirName, commitFileName)); !os.IsNotExist(err) {
		t.Error("a probe file was created under the free-space floor")
	}
}

func TestCommitRefusesOptionsItCannotRun(t *testing.T) {
	for _, o := range []CommitOptions{
		{Ops: 0, Pages: 1, FileSize: 1 << 20},
		{Ops: 1, Pages: 0, FileSize: 1 << 20},
		{Ops: 1, Pages: 10, FileSize: 8 << 10}, // no room for the header, the meta pages and 10 pages
	} {
		o.Dir = t.TempDir()
		if _, err := NewCommit(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// countingBudget records what a round asked of its budget.
type countingBudget struct {
	ops   int
	bytes int64
}

func (b *countingBudget) Wait(ctx context.Context, n int) error {
	b.ops++
	b.bytes += int64(n)
	return ctx.Err()
}

func (b *countingBudget) WouldWait(int) bool { return false }

// The target's rate limits count every write and every fdatasync of a commit, and every
// write of the file's filling, with their bytes: what the probe's own load counters say.
func TestCommitTakesTheBudgetOfEveryWriteAndFdatasync(t *testing.T) {
	dir := t.TempDir()
	p, err := NewCommit(CommitOptions{Dir: dir, Ops: 3, Pages: 5, FileSize: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var b countingBudget
	env := &Env{Budget: &b, Inflight: &Inflight{}}
	var total Result
	for {
		res, err := p.Round(context.Background(), env)
		total.Ops += res.Ops
		total.Bytes += res.Bytes
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNotPrepared) {
			t.Fatal(err)
		}
	}
	if b.ops != total.Ops || b.bytes != total.Bytes {
		t.Errorf("budget asked for %d operations, %d bytes; the rounds did %d, %d", b.ops, b.bytes, total.Ops, total.Bytes)
	}
	ps := int64(os.Getpagesize())
	if want := int64(2<<20-HeaderSize) + 3*6*ps; total.Bytes != want {
		t.Errorf("%d bytes, want %d: the file's filling and three commits of five pages and a meta page", total.Bytes, want)
	}
}

// A commit whose fdatasync fails is observed, as etcd observes backend_commit before it
// gives up, and the file is closed; the next round reopens the filled file and commits.
func TestCommitFailedFdatasyncIsObservedAndTheFileReopened(t *testing.T) {
	h := testenv.MountHangFS(t, testenv.HangFSOptions{Fallocate: true})
	p, err := NewCommit(CommitOptions{Dir: h.Dir, Ops: 2, Pages: 3, FileSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	prepareCommit(t, p, (&commits{}).env())
	h.Fail(unix.EIO, 1, testenv.OpFsync)
	var c commits
	res, err := p.Round(context.Background(), c.env())
	if !errors.Is(err, unix.EIO) {
		t.Fatalf("round with a failing fdatasync: %v, want EIO", err)
	}
	if c.n != 1 || res.Ops != 3+1 { // the three page writes and the failed fdatasync
		t.Errorf("failed commit: %d samples, %+v; want it observed, its four calls counted", c.n, res)
	}
	if p.kind.fill.file.fd >= 0 {
		t.Error("the file is still open after a failed fdatasync")
	}
	c = commits{}
	if _, err := p.Round(context.Background(), c.env()); err != nil || c.n != 2 {
		t.Fatalf("round after the failure: %d commits, %v", c.n, err)
	}
}

// A commit held in the kernel is the target's outstanding operation, with its age, as
// the other probes' calls are.
func TestCommitHeldByTheDiskIsInFlight(t *testing.T) {
	h := testenv.MountHangFS(t, testenv.HangFSOptions{Fallocate: true})
	p, err := NewCommit(CommitOptions{Dir: h.Dir, Ops: 1, Pages: 3, FileSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var inflight Inflight
	env := &Env{Budget: Unlimited, Inflight: &inflight}
	prepareCommit(t, p, env)
	h.Hang(testenv.OpFsync)
	done := make(chan error, 1)
	go func() {
		_, err := p.Round(context.Background(), env)
		done <- err
	}()
	h.WaitHeld(t, 1, 30*time.Second)
	time.Sleep(200 * time.Millisecond)
	if age := inflight.Age(time.Now()); age < 200*time.Millisecond {
		t.Errorf("in-flight age %v while the commit's fdatasync has been held for 200ms", age)
	}
	h.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if age := inflight.Age(time.Now()); age != 0 {
		t.Errorf("in-flight age %v after the round", age)
	}
}
