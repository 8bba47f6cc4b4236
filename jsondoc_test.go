package webhookidempotency

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// modulePath is this module's import path: the packages under it are the
// ones whose sources this test reads.
const modulePath = "github.com/webhookguard/caddy-webhook-idempotency"

// TestJSONFieldsDocumented checks that every JSON field of the project's
// Caddy modules (the handler, the app, the admin API, the stores, and every
// struct their config holds) has a doc comment of its own and a snake_case
// tag: Caddy's module docs are generated from the comment above each field,
// so a field that shares another's comment is shown undocumented.
func TestJSONFieldsDocumented(t *testing.T) {
	t.Parallel()
	var roots []reflect.Type
	for _, id := range caddy.Modules() {
		info, err := caddy.GetModule(id)
		if err != nil {
			t.Fatal(err)
		}
		typ := reflect.TypeOf(info.New())
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		if strings.HasPrefix(typ.PkgPath(), modulePath) {
			roots = append(roots, typ)
		}
	}
	if len(roots) < 5 {
		t.Fatalf("found %d modules of %s registered, want the handler, the app, the admin API and the stores", len(roots), modulePath)
	}

	fields := parseStructFields(t)
	snake := regexp.MustCompile(`^[a-z0-9]+(_[a-z0-9]+)*$`)
	seen := map[reflect.Type]bool{}
	var walk func(typ reflect.Type, from string)
	walk = func(typ reflect.Type, from string) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Array || typ.Kind() == reflect.Map {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] || !strings.HasPrefix(typ.PkgPath(), modulePath) {
			return
		}
		seen[typ] = true
		docs, ok := fields[typ.PkgPath()+"."+typ.Name()]
		if !ok {
			t.Errorf("%s (reached from %s): no struct declaration found in the sources", typ, from)
			return
		}
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			if name == "" {
				if f.Anonymous {
					walk(f.Type, typ.Name())
				}
				continue
			}
			if !snake.MatchString(name) {
				t.Errorf("%s.%s: JSON tag %q is not snake_case", typ, f.Name, name)
			}
			if !docs[f.Name] {
				t.Errorf("%s.%s (json %q): no doc comment of its own", typ, f.Name, name)
			}
			walk(f.Type, typ.Name()+"."+f.Name)
		}
	}
	for _, typ := range roots {
		walk(typ, "module")
	}
}

// parseStructFields reads the module's non-test sources and returns, for
// each struct type ("<import path>.<name>"), whether each of its named
// fields has a doc comment directly above it.
func parseStructFields(t *testing.T) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "e2e") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := modulePath
		if dir := filepath.ToSlash(filepath.Dir(path)); dir != "." {
			pkg += "/" + dir
		}
		for _, decl := range file.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.TYPE {
				continue
			}
			for _, spec := range gen.Specs {
				ts := spec.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				docs := map[string]bool{}
				for _, f := range st.Fields.List {
					for _, n := range f.Names {
						docs[n.Name] = f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != ""
					}
				}
				out[pkg+"."+ts.Name.Name] = docs
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
