package webhookidempotency

import (
	"encoding/json"
	"io"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
)

// TestDependencyPolicy is the import graph as a statement of policy, in the
// spirit of Go's go/build/deps_test.go: the plug-in points are packages the
// root depends on, never the reverse, and each layer imports only what is
// below it. A change that needs another edge changes this table, on
// purpose.
func TestDependencyPolicy(t *testing.T) {
	const mod = "github.com/webhookguard/caddy-webhook-idempotency"
	leaves := []string{"internal/cfparse", "internal/event", "internal/ipset", "internal/metrics", "internal/query",
		"internal/record", "internal/redact", "internal/results", "internal/usage"}
	backends := []string{"store/filestore", "store/memstore", "store/redisstore"}
	// allowed lists, per package (a path pattern), the module's packages it
	// may import; every package of the module must match a rule.
	allowed := []struct {
		pkg   string
		may   []string
		about string
	}{
		{"store", nil, "the contract imports nothing of the module"},
		{"signature", []string{"internal/query"}, "the schemes know neither Caddy nor stores"},
		{"internal/query", nil, "a leaf"},
		{"internal/cfparse", nil, "a leaf"},
		{"internal/usage", nil, "a leaf"},
		{"internal/ipset", nil, "a leaf"},
		{"internal/metrics", nil, "a leaf"},
		{"internal/record", nil, "a leaf"},
		{"internal/redact", nil, "a leaf"},
		{"internal/results", nil, "a leaf"},
		{"internal/event", []string{"internal/redact"}, "stored events"},
		{"store/storetest", []string{"store", "internal/record"}, "the contract suite"},
		{"store/*", append([]string{"store"}, leaves...), "a backend needs the contract and leaves, never another backend or a subsystem"},
		{"internal/inbox", append(append([]string{"store", "internal/forward", "internal/series"}, leaves...), backends...), "a subsystem: the contract, leaves, the backends' Streams and File, the handoff, and the series it counts in"},
		{"internal/series", append(append([]string{"store"}, leaves...), backends...), "a subsystem: the contract, leaves, and the backends' Streams and File"},
		{"internal/archive", append(append([]string{"store"}, leaves...), backends...), "a subsystem: the contract, leaves, and the backends' Streams and File"},
		{"internal/testkit", nil, "the harness"},
		{"internal/sigtest", []string{"signature"}, "signature test cases"},
		{"internal/keyset", []string{"signature"}, "key sets fetched and shared, for the schemes that need one"},
		{"internal/forward", []string{"signature", "internal/cfparse"}, "the handoff to the application: a signature kept, re-signed, replaced or removed"},
		{"internal/reconcile", append([]string{"store"}, leaves...), "a subsystem: the contract and leaves; the root hands it the inbox, its key rule and its signer"},
		{"internal/edge", append([]string{"providers"}, leaves...), "the edge checks: address lists (a preset's published list) and client certificates, never the root"},
		{"internal/batch", nil, "a leaf: bodies split into items and written again"},
		{"internal/jsonmember", nil, "a leaf: a json: key path read in one pass"},
		{"providers", []string{"signature", "internal/cfparse", "internal/keyset", "internal/query"}, "the presets: declarations over the schemes, knowing no store nor subsystem"},
		{"internal/admin", append(append([]string{"store", "signature", "providers", "internal/inbox", "internal/archive", "internal/forward", "internal/reconcile", "internal/series"}, leaves...), backends...),
			"the operator surface: the running routes through the view the root publishes, never the root"},
		{"", append(append([]string{"store", "signature", "providers", "internal/inbox", "internal/archive", "internal/admin", "internal/forward", "internal/reconcile", "internal/batch", "internal/edge", "internal/jsonmember", "internal/series"}, leaves...), backends...), "the root: everything below it"},
		{"cmd/*", []string{""}, "a Caddy with the module"},
		{"e2e/*", nil, "black-box tests: the root by a blank import (test files)"},
		{"e2e", nil, "black-box tests"},
		{"bench/*", nil, "load-test programs"},
		{"dashboards/*", nil, "the dashboard generator"},
	}
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", mod+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		seen++
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, mod), "/")
		rule := -1
		for i, r := range allowed {
			if ok, _ := path.Match(r.pkg, rel); ok && (r.pkg != "" || rel == "") {
				rule = i
				break
			}
		}
		if rule < 0 {
			t.Errorf("package %q has no rule in the dependency policy: add one", rel)
			continue
		}
		for _, imp := range p.Imports {
			if imp != mod && !strings.HasPrefix(imp, mod+"/") {
				continue
			}
			irel := strings.TrimPrefix(strings.TrimPrefix(imp, mod), "/")
			if !slices.Contains(allowed[rule].may, irel) {
				t.Errorf("%q imports %q, which the policy does not allow (%s)", orRoot(rel), orRoot(irel), allowed[rule].about)
			}
		}
		if rel == "signature" {
			for _, imp := range p.Imports {
				if strings.HasPrefix(imp, "github.com/caddyserver/") {
					t.Errorf("signature imports %s: the schemes must not depend on Caddy", imp)
				}
			}
		}
	}
	if seen < 15 {
		t.Fatalf("go list listed %d packages; is the module's layout readable?", seen)
	}
}

func orRoot(rel string) string {
	if rel == "" {
		return "(root)"
	}
	return rel
}
