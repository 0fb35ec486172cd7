package probe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// pageWriter is a probe kind written as a new one is: a struct with run and closeFiles,
// wrapped in prober. Each operation writes one 4 KiB page at a scattered offset of its
// own file and fdatasyncs it, the pair timed as one sample. What it does through r is all
// a kind may do; what it does not do (bind the round to its thread, open, pause and read
// the CPU-wait clock, mark calls in flight, close the clock's descriptors) the wrapper
// and the round do.
type pageWriter struct {
	path  string
	fd    int
	ops   int
	page  []byte
	calls [2]ioCall
	rng   *rand.Rand

	// What the test looks at from inside the round: the untimed calls' fn, and whether
	// the file is dropped after the round's first operation, as after a failed fdatasync.
	inUntimed func()
	dropFile  bool
}

const pageSize = 4096

// newPageWriter is the kind's constructor: the kind, wrapped.
func newPageWriter(dir string, ops int) *prober[*pageWriter] {
	return &prober[*pageWriter]{kind: &pageWriter{path: filepath.Join(dir, "page.probe"), fd: -1, ops: ops,
		page: make([]byte, pageSize), rng: rand.New(newRNG()), inUntimed: func() {}}}
}

func (k *pageWriter) run(ctx context.Context, r *round) (Result, error) {
	var res Result
	if k.fd < 0 {
		// Creating the file may hang as a write does: untimed.
		if err := r.untimed(func() error { k.inUntimed(); return k.create() }); err != nil {
			return res, err
		}
	}
	for i := range k.ops {
		if err := r.waitBudget(ctx, len(k.page)); err != nil {
			return res, err
		}
		off := pageSize * (1 + k.rng.Int64N(63))
		k.calls = [2]ioCall{{sys: sysPwrite, fd: k.fd, buf: k.page, off: off}, {sys: sysFdatasync, fd: k.fd}}
		d, _, err := r.timed(k.path, k.calls[:], nil)
		if err != nil {
			return res, err
		}
		r.observe(Sample{Phase: PhaseFdatasync, Duration: d})
		res.Ops++
		res.Bytes += int64(len(k.page))
		res.IO += d
		if i == 0 && k.dropFile {
			_ = k.closeFiles()
			if err := r.untimed(k.create); err != nil {
				return res, err
			}
		}
	}
	// A check after the timed calls, such as stillLinked: untimed.
	err := r.untimed(func() error { k.inUntimed(); return nil })
	return res, err
}

func (k *pageWriter) create() error {
	fd, err := openFD(k.path, unix.O_RDWR|unix.O_CREAT, 0o600)
	if err != nil {
		return err
	}
	if err := ignoringEINTR(func() error { return unix.Ftruncate(fd, 64*pageSize) }); err != nil {
		_ = unix.Close(fd)
		return err
	}
	k.fd = fd
	return nil
}

func (k *pageWriter) closeFiles() error {
	if k.fd >= 0 {
		_ = unix.Close(k.fd)
		k.fd = -1
	}
	return nil
}

// stepBudget is a budget that would not wait when free, and which calls inWait from Wait.
type stepBudget struct {
	free   bool
	inWait func()
}

func (b *stepBudget) Wait(ctx context.Context, _ int) error { b.inWait(); return ctx.Err() }
func (b *stepBudget) WouldWait(int) bool                    { return !b.free }

// schedstatFDs counts this process's descriptors open on a thread's schedstat.
func schedstatFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.HasSuffix(target, "/schedstat") {
			n++
		}
	}
	return n
}

// TestTheWrapperDoesTheStepsAKindLeavesOut runs pageWriter and looks, from inside its
// round, at what the round and the wrapper did for it: the CPU-wait segment closed in an
// untimed call and before a budget wait that may sleep (and only then), the call marked
// in flight, nothing in flight after the round, the CPU wait measured, the clock's
// descriptors kept when the kind drops its file and closed by Close.
func TestTheWrapperDoesTheStepsAKindLeavesOut(t *testing.T) {
	if err := CheckCPUWait(); err != nil {
		t.Skip(err)
	}
	before := schedstatFDs(t)
	p := newPageWriter(t.TempDir(), 4)
	defer p.Close()
	var inflight Inflight
	type seen struct{ inSegment, inflight bool }
	var untimed, waits []seen
	look := func() seen { return seen{p.round.clock.inSegment, inflight.start.Load() != 0} }
	p.kind.inUntimed = func() { untimed = append(untimed, look()) }
	budget := &stepBudget{inWait: func() { waits = append(waits, look()) }}
	env := &Env{Budget: budget, Inflight: &inflight}

	for _, free := range []bool{false, true} {
		untimed, waits = nil, nil
		budget.free = free
		res, err := p.Round(context.Background(), env)
		if err != nil || res.Ops != 4 {
			t.Fatalf("round: %+v %v; want 4 operations", res, err)
		}
		if !res.CPUWaitKnown {
			t.Error("the round's CPU wait is unknown")
		}
		if inflight.start.Load() != 0 {
			t.Error("an operation is still marked in flight after the round")
		}
		for i, s := range untimed {
			if s.inSegment || !s.inflight {
				t.Errorf("untimed call %d of %d: CPU-wait segment open %v, in flight %v; want closed, in flight", i+1, len(untimed), s.inSegment, s.inflight)
			}
		}
		if len(untimed) == 0 {
			t.Error("the kind's untimed calls never ran")
		}
		// The first wait comes before any timed call; each later one follows a timed
		// call, whose segment stays open over a wait that cannot sleep (WouldWait false) and closes
		// before one that may.
		if len(waits) != 4 {
			t.Fatalf("%d budget waits, want 4", len(waits))
		}
		for i, s := range waits[1:] {
			if s.inSegment != free || s.inflight {
				t.Errorf("budget wait %d, token free %v: CPU-wait segment open %v, in flight %v; want open only when it would not wait, never in flight", i+2, free, s.inSegment, s.inflight)
			}
		}
	}
	open := schedstatFDs(t)
	if open <= before {
		t.Fatalf("%d schedstat descriptors open after two rounds, %d before: the clock did not read one", open, before)
	}

	// The kind drops and recreates its file mid-round: the clock's descriptors are not
	// its to close, and the round's CPU wait is still read.
	p.kind.dropFile = true
	res, err := p.Round(context.Background(), &Env{Budget: Unlimited, Inflight: &inflight})
	if err != nil || !res.CPUWaitKnown {
		t.Fatalf("round that replaced its file: %+v %v; want its CPU wait known", res, err)
	}
	if n := schedstatFDs(t); n < open {
		t.Errorf("%d schedstat descriptors after the kind dropped its file, %d before", n, open)
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if n := schedstatFDs(t); n != before {
		t.Errorf("%d schedstat descriptors open after Close, %d before the probe: the clock's leaked", n, before)
	}
	if p.kind.fd >= 0 {
		t.Error("Close left the kind's file open")
	}
}

// TestATimedCallIsInFlightWhileTheDiskHoldsIt holds pageWriter's write, the first call
// of its timed region, then its fdatasync, the second, in a FUSE filesystem, and reads
// the in-flight age while each is held, as a scrape does: each call is in flight from
// its own start.
func TestATimedCallIsInFlightWhileTheDiskHoldsIt(t *testing.T) {
	h := testenv.MountHangFS(t, testenv.HangFSOptions{})
	p := newPageWriter(h.Dir, 1)
	defer p.Close()
	var inflight Inflight
	env := &Env{Budget: Unlimited, Inflight: &inflight}
	if _, err := p.Round(context.Background(), env); err != nil { // creates the file
		t.Fatal(err)
	}
	const writeHeld = time.Second
	for attempt := 1; ; attempt++ {
		held := h.EverHeld()
		h.Hang(testenv.OpWrite)
		done := make(chan error, 1)
		go func() {
			_, err := p.Round(context.Background(), env)
			done <- err
		}()
		h.WaitHeld(t, 1, 30*time.Second)
		time.Sleep(writeHeld)
		if age := inflight.Age(time.Now()); age < writeHeld {
			t.Errorf("in-flight age %v while the write has been held for %v", age, writeHeld)
		}
		// Let the write go and hold the fdatasync that follows it. The fdatasync can
		// slip through between the two (a few microseconds): then the round ends, and
		// it is tried again.
		h.Release()
		h.Hang(testenv.OpFsync)
		var slipped bool
		testenv.WaitFor(t, 30*time.Second, "the fdatasync held or the round over", func() bool {
			select {
			case err := <-done:
				slipped = true
				done <- err
				return true
			default:
				return h.EverHeld() == held+2 // the write, then the fdatasync
			}
		})
		if !slipped {
			if age := inflight.Age(time.Now()); age <= 0 || age >= writeHeld {
				t.Errorf("in-flight age %v while the fdatasync is held, after a write held for %v; want the fdatasync's own", age, writeHeld)
			}
		}
		h.Release()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if age := inflight.Age(time.Now()); age != 0 {
			t.Errorf("in-flight age %v after the round", age)
		}
		if !slipped || attempt == 5 {
			if slipped {
				t.Error("the fdatasync was never held in 5 rounds")
			}
			return
		}
	}
}

// A kind that leaves out a step does not compile. These are the compiler's messages
// (go build of this package with the snippets below added, Go 1.26); the test below
// builds them and checks each:
//
//	a kind used as a Prober without the wrapper: Round and Close are prober's alone
//	  cannot use unwrapped{} (value of struct type unwrapped) as Prober value in variable
//	  declaration: unwrapped does not implement Prober (missing method Close)
//	a kind that closes its files in a Close of its own: the wrapper's Close, which also
//	  closes the clock's descriptors, is the only one
//	  closesItself does not satisfy kind (missing method closeFiles)
//	a kind that wants the Env, to wait on the budget or mark a call by hand
//	  wantsEnv does not satisfy kind (wrong type for method run)
//	    have run(context.Context, *Env) (Result, error)
//	    want run(context.Context, *round) (Result, error)
//	a kind that opens or pauses a CPU-wait segment: it has no clock
//	  k.cpu undefined (type *handTimed has no field or method cpu)
//	nor does its round lend it the in-flight mark
//	  r.Inflight undefined (type *round has no field or method Inflight)
//	a budget that cannot say whether a token is free
//	  cannot use waitsOnly{} (value of struct type waitsOnly) as Budget value in struct
//	  literal: waitsOnly does not implement Budget (missing method WouldWait)
var skippedSteps = []struct{ code, want string }{
	{`type unwrapped struct{}

func (unwrapped) run(context.Context, *round) (Result, error) { return Result{}, nil }
func (unwrapped) closeFiles() error                            { return nil }

var _ Prober = unwrapped{}`, "unwrapped does not implement Prober (missing method Close)"},
	{`type closesItself struct{}

func (closesItself) run(context.Context, *round) (Result, error) { return Result{}, nil }
func (closesItself) Close() error                               { return nil }

var _ Prober = &prober[closesItself]{}`, "closesItself does not satisfy kind (missing method closeFiles)"},
	{`type wantsEnv struct{}

func (wantsEnv) run(context.Context, *Env) (Result, error) { return Result{}, nil }
func (wantsEnv) closeFiles() error                         { return nil }

var _ Prober = &prober[wantsEnv]{}`, "wantsEnv does not satisfy kind (wrong type for method run)"},
	{`type handTimed struct{}

func (k *handTimed) run(ctx context.Context, r *round) (Result, error) {
	k.cpu.begin()
	return Result{}, nil
}`, "k.cpu undefined (type *handTimed has no field or method cpu)"},
	{`func markByHand(r *round) {
	r.Inflight.begin(time.Now())
}`, "r.Inflight undefined (type *round has no field or method Inflight)"},
	{`type waitsOnly struct{}

func (waitsOnly) Wait(context.Context, int) error { return nil }

var _ = Env{Budget: waitsOnly{}}`, "waitsOnly does not implement Budget (missing method WouldWait)"},
}

// TestAKindThatLeavesOutAStepDoesNotCompile builds this package with skippedSteps added
// (go build -overlay, the compiler itself, which names the snippets' file in its
// messages) and finds each snippet's message at its line.
func TestAKindThatLeavesOutAStepDoesNotCompile(t *testing.T) {
	pkg, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	src.WriteString("package probe\n\nimport (\n\t\"context\"\n\t\"time\"\n)\n\nvar _ = time.Now\n")
	line := strings.Count(src.String(), "\n") + 1
	lines := make([]int, len(skippedSteps)) // each snippet's first and last lines
	last := make([]int, len(skippedSteps))
	for i, s := range skippedSteps {
		src.WriteString("\n" + s.code + "\n")
		lines[i] = line + 1
		line += strings.Count(s.code, "\n") + 2
		last[i] = line - 1
	}
	dir := t.TempDir()
	snippet := filepath.Join(dir, "snippets.go")
	must(t, os.WriteFile(snippet, []byte(src.String()), 0o600))
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(pkg, "zz_skipped_steps.go"): snippet}})
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "overlay.json"), overlay, 0o600))

	cmd := exec.Command("go", "build", "-overlay", filepath.Join(dir, "overlay.json"), "-o", os.DevNull, ".")
	cmd.Dir = pkg
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("go build with the snippets: %v, want the compiler to refuse them\n%s", err, out)
	}
	found := make([]bool, len(skippedSteps))
	msg := regexp.MustCompile(`(?m)^\S*` + regexp.QuoteMeta(filepath.Base(snippet)) + `:(\d+):\d+: (.*)$`)
	for _, m := range msg.FindAllStringSubmatch(string(out), -1) {
		at, _ := strconv.Atoi(m[1])
		for i, s := range skippedSteps {
			if at >= lines[i] && at <= last[i] && strings.Contains(m[2], s.want) {
				found[i] = true
			}
		}
	}
	for i, s := range skippedSteps {
		if !found[i] {
			t.Errorf("snippet %d (lines %d-%d) compiled without %q", i+1, lines[i], last[i], s.want)
		}
	}
	if t.Failed() {
		t.Logf("the compiler said:\n%s", out)
	}
}

// TestOnlyTheContractTouchesTheClockAndTheInflightMark keeps the contract by
// construction inside this package too, where the compiler lets every file reach every
// unexported field: it type-checks the package's own files and fails on a round's field,
// the CPU-wait clock or an in-flight mark used outside the files that own them, and on a
// Prober in the package that is not prober (a kind that wrote its own Round).
func TestOnlyTheContractTouchesTheClockAndTheInflightMark(t *testing.T) {
	fset, files, info, pkg := typeCheckThisPackage(t)
	scope := pkg.Scope()
	named := func(name string) *types.Named { return scope.Lookup(name).Type().(*types.Named) }
	roundType, clockType, inflightType := named("round"), named("cpuClock"), named("Inflight")
	owners := map[*types.Named][]string{
		roundType:    {"round.go"},
		clockType:    {"round.go", "cpuwait.go"},
		inflightType: {"round.go", "probe.go"}, // begin, beginAt and end; Do is for everyone
	}
	for _, f := range files {
		file := filepath.Base(fset.File(f.Pos()).Name())
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			s := info.Selections[sel]
			if s == nil {
				return true
			}
			recv := s.Recv()
			if p, ok := recv.(*types.Pointer); ok {
				recv = p.Elem()
			}
			rn, ok := recv.(*types.Named)
			if !ok || owners[rn] == nil || (rn == inflightType && s.Obj().Name() == "Do") || slices.Contains(owners[rn], file) {
				return true
			}
			if rn == roundType && s.Kind() == types.MethodVal {
				return true // a round's methods are what a kind may do
			}
			t.Errorf("%s: %s.%s outside %s", fset.Position(sel.Pos()), rn.Obj().Name(), s.Obj().Name(), strings.Join(owners[rn], ", "))
			return true
		})
	}
	prober := scope.Lookup("Prober").Type().Underlying().(*types.Interface)
	wrapper := named("prober")
	for _, name := range scope.Names() {
		tn, ok := scope.Lookup(name).(*types.TypeName)
		if !ok || tn.IsAlias() || tn.Type() == wrapper {
			continue
		}
		if !types.Implements(types.NewPointer(tn.Type()), prober) {
			continue
		}
		// A Prober here is prober, or a struct that embeds it (Fsync and the others).
		st, ok := tn.Type().Underlying().(*types.Struct)
		embeds := false
		for i := 0; ok && i < st.NumFields(); i++ {
			if f := st.Field(i); f.Embedded() {
				if n, ok := f.Type().(*types.Named); ok && n.Origin() == wrapper {
					embeds = true
				}
			}
		}
		if !embeds {
			t.Errorf("%s: %s is a Prober of its own, not a kind wrapped in prober", fset.Position(tn.Pos()), name)
		}
	}
}

// typeCheckThisPackage type-checks the package's non-test files, with its imports read
// from the export data the go command builds for them.
func typeCheckThisPackage(t *testing.T) (*token.FileSet, []*ast.File, *types.Info, *types.Package) {
	t.Helper()
	cmd := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}={{.Export}}", ".")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	exports := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(l, "="); ok && file != "" {
			exports[path] = file
		}
	}
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	must(t, err)
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, 0)
		must(t, err)
		files = append(files, f)
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if exports[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(exports[path])
	})
	info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}}
	pkg, err := (&types.Config{Importer: imp}).Check("probe", fset, files, info)
	if err != nil {
		t.Fatal(err)
	}
	return fset, files, info, pkg
}
