package e2e

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestDaemonNeverShellsOut: a prober that runs as a privileged daemon on every storage
// host must not run other programs. No daemon source file imports os/exec or calls a
// process-starting function, and os/exec is not linked into the binary at all (through a
// dependency either).
func TestDaemonNeverShellsOut(t *testing.T) {
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..")
	starters := map[string]bool{
		"os.StartProcess": true, "syscall.ForkExec": true, "syscall.Exec": true,
		"syscall.StartProcess": true, "unix.Exec": true,
	}
	scanned := 0
	for _, dir := range []string{"cmd", "collector", "probe", "config", "device", "check"} {
		filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				t.Errorf("%s: %v", path, err)
				return nil
			}
			scanned++
			for _, imp := range f.Imports {
				if p, _ := strconv.Unquote(imp.Path.Value); p == "os/exec" {
					t.Errorf("%s imports os/exec", fset.Position(imp.Pos()))
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					if x, ok := sel.X.(*ast.Ident); ok && starters[x.Name+"."+sel.Sel.Name] {
						t.Errorf("%s calls %s.%s", fset.Position(sel.Pos()), x.Name, sel.Sel.Name)
					}
				}
				return true
			})
			return nil
		})
	}
	if scanned < 10 {
		t.Fatalf("only %d daemon source files found under %s: wrong root?", scanned, root)
	}

	cmd := exec.Command("go", "list", "-deps", "./cmd/diskprobe_exporter")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, p := range deps {
		if p == "os/exec" {
			t.Errorf("os/exec is linked into the daemon through a dependency")
		}
	}
	t.Logf("%d daemon source files scanned, %d packages linked, none runs a program", scanned, len(deps))
}
