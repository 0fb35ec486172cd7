package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// goPackage is what a package of the daemon's module declares, as its comments may name it.
type goPackage struct {
	name    string
	decls   map[string]bool            // package-level names: types, funcs, vars, consts
	members map[string]map[string]bool // by type: its fields and methods, promoted ones too
	files   []*ast.File
	fset    *token.FileSet
}

// parsePackage reads every .go file of dir (tests too: their comments name things, and
// their declarations may be what a comment names).
func parsePackage(t *testing.T, dir string) *goPackage {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := &goPackage{decls: map[string]bool{}, members: map[string]map[string]bool{}, fset: fset}
	embeds := map[string][]string{}
	member := func(typ, name string) {
		if p.members[typ] == nil {
			p.members[typ] = map[string]bool{}
		}
		p.members[typ][name] = true
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(f.Name.Name, "_test") {
			p.name = f.Name.Name
		}
		p.files = append(p.files, f)
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					p.decls[d.Name.Name] = true
					continue
				}
				typ := d.Recv.List[0].Type
				for {
					switch x := typ.(type) {
					case *ast.StarExpr:
						typ = x.X
						continue
					case *ast.IndexExpr:
						typ = x.X
						continue
					case *ast.IndexListExpr:
						typ = x.X
						continue
					}
					break
				}
				if id, ok := typ.(*ast.Ident); ok {
					member(id.Name, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						p.decls[s.Name.Name] = true
						member(s.Name.Name, "") // a type with no members is still a type
						var fields *ast.FieldList
						switch x := s.Type.(type) {
						case *ast.StructType:
							fields = x.Fields
						case *ast.InterfaceType:
							fields = x.Methods
						}
						if fields == nil {
							continue
						}
						for _, fl := range fields.List {
							for _, n := range fl.Names {
								member(s.Name.Name, n.Name)
							}
							if len(fl.Names) == 0 { // embedded: its name, and its members
								typ := fl.Type
								if st, ok := typ.(*ast.StarExpr); ok {
									typ = st.X
								}
								switch x := typ.(type) {
								case *ast.Ident:
									member(s.Name.Name, x.Name)
									embeds[s.Name.Name] = append(embeds[s.Name.Name], x.Name)
								case *ast.SelectorExpr:
									member(s.Name.Name, x.Sel.Name)
								case *ast.IndexExpr:
									if id, ok := x.X.(*ast.Ident); ok {
										member(s.Name.Name, id.Name)
										embeds[s.Name.Name] = append(embeds[s.Name.Name], id.Name)
									}
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							p.decls[n.Name] = true
						}
					}
				}
			}
		}
	}
	// Promoted members, through embedded types of the package, to any depth.
	for changed := true; changed; {
		changed = false
		for typ, inner := range embeds {
			for _, in := range inner {
				for m := range p.members[in] {
					if !p.members[typ][m] {
						member(typ, m)
						changed = true
					}
				}
			}
		}
	}
	return p
}

var (
	// pkg.Name or pkg.Type.Member, where pkg is a package of the module.
	qualifiedName = regexp.MustCompile(`\b([a-z][a-z0-9]*)\.([A-Z][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?`)
	// Type.Member, where Type is a type of the comment's own package.
	memberName = regexp.MustCompile(`\b([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)\b`)
	// `Name` or `Name(...)`: an exported identifier in backticks (not an all-capitals word).
	backticked = regexp.MustCompile("`\\*?&?([A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*)(?:[(`{\\[])")
	// A bare word in CamelCase with a capital inside (ErrNotPrepared, ProbeKinds): an
	// identifier, unless it is one of notIdentifiers.
	camelWord = regexp.MustCompile(`(?:^|[^\x60.\w])([A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*)\b`)
	// CamelCase words in comments that name no identifier of the module: units, products,
	// alerts, and the identifiers of other packages a comment names bare.
	notIdentifiers = regexp.MustCompile(`^(KiB|MiB|GiB|TiB|PostgreSQL|OpenMetrics|Diskprobe[A-Za-z]+|` +
		`ConnState|NewTimer|WithLabelValues|DeletePartialMatch|HistogramVecs?|UnixNano|PathError|BestSpeed|` +
		`StartProcess|EvalSymlinks|RawSyscall|WriteTimeout|NativeBucketFactor|DefNativeHistogramZeroThreshold|` +
		`MarshalJSON|UnmarshalYAML|TestMain|RunQueue|MaxRequestsInFlight|DefaultModule|AppArmor)$`)
	// A test, benchmark or fuzz target, which a comment may name from either module.
	testFunc = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz|Example)[A-Za-z0-9_]*)\(`)
	// What follows a dot in a file name, not a member.
	fileSuffix = map[string]bool{"go": true, "md": true, "yml": true, "yaml": true, "json": true, "sh": true, "txt": true, "probe": true, "service": true, "conf": true, "socket": true}
)

// TestCommentsNameIdentifiersThatExist: a comment that names an identifier the code no
// longer has (collector.Resolver after it moved to inspect, "Resolve fills in..." where
// there was no Resolve, a `Kind` set by a function since renamed) misleads the next reader
// exactly where they look for why. In the daemon's packages (scripts/daemon-packages.sh),
// every pkg.Name, pkg.Type.Member and Type.Member of the package's own types, every
// exported identifier in backticks, every bare CamelCase word (but units, products and
// other packages' names, notIdentifiers) and every test a comment names must exist.
func TestCommentsNameIdentifiersThatExist(t *testing.T) {
	byName := map[string]*goPackage{}
	var daemon []*goPackage
	for _, dir := range append(daemonPackages(t), "internal/testenv") {
		p := parsePackage(t, testenv.RepoPath(dir))
		byName[p.name] = p
		if dir != "internal/testenv" {
			daemon = append(daemon, p)
		}
	}
	tests := testNames(t)
	for _, p := range daemon {
		for _, f := range p.files {
			for _, cg := range f.Comments {
				for _, c := range cg.List {
					for _, msg := range commentErrors(c.Text, p, byName, tests) {
						t.Errorf("%s: %s", p.fset.Position(c.Slash), msg)
					}
				}
			}
		}
	}
}

// commentErrors are the names text gives that p (or the package it qualifies) lacks.
func commentErrors(text string, p *goPackage, byName map[string]*goPackage, tests map[string]bool) []string {
	var errs []string
	for _, m := range qualifiedName.FindAllStringSubmatch(text, -1) {
		q, ok := byName[m[1]]
		if !ok || m[1] == "main" {
			continue // another package (os.Stat, unix.Fdatasync), or prose
		}
		if !q.decls[m[2]] {
			errs = append(errs, m[1]+"."+m[2]+": package "+m[1]+" declares no "+m[2])
			continue
		}
		if m[3] != "" && q.members[m[2]] != nil && !fileSuffix[m[3]] && !q.members[m[2]][m[3]] {
			errs = append(errs, m[0]+": "+m[1]+"."+m[2]+" has no field or method "+m[3])
		}
	}
	for _, m := range memberName.FindAllStringSubmatchIndex(text, -1) {
		typ, name := text[m[2]:m[3]], text[m[4]:m[5]]
		if m[2] > 0 && text[m[2]-1] == '.' {
			continue // the second dot of pkg.Type.Member, checked above
		}
		if _, isPkg := byName[typ]; isPkg || p.members[typ] == nil || fileSuffix[name] {
			continue
		}
		if !p.members[typ][name] {
			errs = append(errs, typ+"."+name+": "+typ+" has no field or method "+name)
		}
	}
	for _, m := range backticked.FindAllStringSubmatch(text, -1) {
		if name := m[1]; !declared(name, p, byName) {
			errs = append(errs, "`"+name+"`: no such identifier in package "+p.name+" or the module")
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "//\t") {
			continue // a code block: a command line, a pattern
		}
		for _, m := range camelWord.FindAllStringSubmatchIndex(line, -1) {
			name := line[m[2]:m[3]]
			switch {
			case notIdentifiers.MatchString(name), strings.HasPrefix(line[m[3]:], "="): // a systemd directive
			case testFunc.MatchString("func " + name + "("):
				if !tests[name] {
					errs = append(errs, name+": no such test in either module")
				}
			case !declared(name, p, byName) && !declared(strings.TrimSuffix(name, "s"), p, byName):
				errs = append(errs, name+": no such identifier in package "+p.name+" or the module")
			}
		}
	}
	return errs
}

// testNames are the test, benchmark, fuzz and example functions of both modules.
func testNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	err := filepath.WalkDir(testenv.RepoPath("."), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "dist") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range testFunc.FindAllStringSubmatch(string(data), -1) {
			names[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// declared says whether name is a package-level name or a member of a type of p, or a
// package-level name of any package of the module.
func declared(name string, p *goPackage, byName map[string]*goPackage) bool {
	if p.decls[name] || slices.ContainsFunc(mapsOf(p.members), func(ms map[string]bool) bool { return ms[name] }) {
		return true
	}
	for _, q := range byName {
		if q.decls[name] {
			return true
		}
	}
	return false
}

func mapsOf(m map[string]map[string]bool) []map[string]bool {
	out := make([]map[string]bool, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
