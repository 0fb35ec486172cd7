package config

import (
	"go/ast"
	goparser "go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestConfigMakesNoSystemCall reads this package's own source: parsing and validation must
// not ask the disk, the clock or the working directory (inspect does what asks the disk,
// under a bounded wait). Every import of a non-test file is on a list, and of the packages
// that can make system calls only the pure functions are: filepath.Abs, EvalSymlinks or
// Glob, time.Now, or any function of probe, fails this test by name and line.
func TestConfigMakesNoSystemCall(t *testing.T) {
	all := map[string]bool{"*": true}
	allowed := map[string]map[string]bool{
		"errors": all, "fmt": all, "math": all, "regexp": all, "slices": all, "sort": all,
		"strconv": all, "strings": all, "unicode": all,
		"go.yaml.in/yaml/v3":                                        all,
		"github.com/prometheus/common/model":                        {"ParseDuration": true, "Duration": true},
		"github.com/diskprobe/diskprobe_exporter/internal/bytesize": all,
		"path/filepath":                                             {"Base": true, "Clean": true, "Dir": true, "IsAbs": true, "Join": true, "Separator": true},
		"time":                                                      {"Duration": true, "Second": true, "Minute": true, "Hour": true, "Millisecond": true, "ParseDuration": true},
		// Constants, and the kinds' declarations (data each kind's file registers at
		// init, read here as values: no kind is built, so no system call): the probe
		// directory's name, the probe file header's size, the read file's default size.
		"github.com/diskprobe/diskprobe_exporter/probe": {"DirName": true, "HeaderSize": true, "DefaultReadFileSize": true,
			"Kinds": true, "LookupKind": true, "Kind": true, "Settings": true, "OnDirectories": true, "OnBlockDevices": true},
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := goparser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		local := map[string]string{} // the name a file uses for an import -> its path
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if allowed[path] == nil {
				t.Errorf("%s imports %q: config must not make system calls (inspect asks the disk)", fset.Position(imp.Pos()), path)
				continue
			}
			n := filepath.Base(path)
			if path == "go.yaml.in/yaml/v3" {
				n = "yaml"
			}
			if imp.Name != nil {
				n = imp.Name.Name
			}
			local[n] = path
		}
		ast.Inspect(f, func(node ast.Node) bool {
			sel, ok := node.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if sel.Sel.Name == "New" {
				// A probe.Kind's constructor opens its probe directory: config reads a
				// kind's declaration and never builds one.
				t.Errorf("%s uses .New: config must not build a probe kind", fset.Position(sel.Pos()))
			}
			x, ok := sel.X.(*ast.Ident)
			if !ok || x.Obj != nil { // a local variable's field or method, not a package's
				return true
			}
			path, ok := local[x.Name]
			if !ok {
				return true
			}
			if names := allowed[path]; !names["*"] && !names[sel.Sel.Name] {
				t.Errorf("%s uses %s.%s: not on the list of what config may call without a system call", fset.Position(sel.Pos()), x.Name, sel.Sel.Name)
			}
			return true
		})
	}
	if checked < 5 {
		t.Fatalf("checked %d files: the test is not reading the package", checked)
	}
}
