package webhookidempotency

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	// the directives the golden Caddyfiles use besides ours
	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

// Golden adapt tests, in the format of Caddy's
// caddytest/integration/caddyfile_adapt: a Caddyfile, a line of ten dashes,
// then the JSON that `caddy adapt` must produce. Regenerate the JSON with
//
//	go test -run TestAdaptGolden . -update-adapt
//
// (or UPDATE_GOLDEN=1) and read the diff before committing it.
//
// Every adapted config is loaded back (provisioned and validated, without
// starting servers). A Caddyfile whose first line is `# adapt only` is
// checked for its JSON; its load is attempted and logged but not required
// (it needs signature verification schemes that are not in every build).

var updateAdapt = flag.Bool("update-adapt", false, "rewrite the expected JSON of testdata/caddyfile_adapt/*.caddyfiletest")

const adaptSeparator = "\n----------\n"

func TestAdaptGolden(t *testing.T) {
	// secrets of the adapt-only presets, resolved at provision time
	t.Setenv("STRIPE_WEBHOOK_SECRET", "whsec_dGVzdA==")
	t.Setenv("HOOK_SECRET", "s3cret")

	files, err := filepath.Glob(filepath.Join("testdata", "caddyfile_adapt", "*.caddyfiletest"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 8 {
		t.Fatalf("found %d golden files, want at least 8", len(files))
	}
	update := *updateAdapt || os.Getenv("UPDATE_GOLDEN") != ""
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".caddyfiletest"), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			input, want, ok := strings.Cut(string(data), adaptSeparator)
			if !ok {
				t.Fatalf("%s: no %q separator line", file, strings.TrimSpace(adaptSeparator))
			}
			adapted, err := adaptCaddyfile(t, input)
			if err != nil {
				t.Fatalf("adapt: %v", err)
			}
			got := indentJSON(t, adapted)
			if update {
				if err := os.WriteFile(file, []byte(input+adaptSeparator+got+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			} else if normalizeJSON(t, []byte(want)) != normalizeJSON(t, adapted) {
				t.Errorf("adapted JSON differs from %s\n--- got ---\n%s\n--- want ---\n%s", file, got, strings.TrimSpace(want))
			}

			checkHandlersRoundTrip(t, adapted)

			adaptOnly := strings.HasPrefix(input, "# adapt only")
			cfg := new(caddy.Config)
			if err := json.Unmarshal(adapted, cfg); err != nil {
				t.Fatalf("adapted JSON does not unmarshal into a caddy.Config: %v", err)
			}
			err = caddy.Validate(cfg)
			switch {
			case err != nil && adaptOnly:
				t.Logf("adapt-only config does not load in this build: %v", err)
			case err != nil:
				t.Errorf("adapted config does not load: %v\n%s", err, got)
			}
		})
	}
}

// checkHandlersRoundTrip finds every webhook_idempotency handler in an
// adapted config and checks that its JSON decodes into Handler with no
// unknown field and encodes back to the same JSON: nothing the adapter
// writes is dropped on load.
func checkHandlersRoundTrip(t *testing.T, adapted []byte) {
	t.Helper()
	var cfg any
	if err := json.Unmarshal(adapted, &cfg); err != nil {
		t.Fatal(err)
	}
	var found int
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["handler"] == "webhook_idempotency" {
				found++
				// the handler's own fields: "handler" is the module key
				fields := make(map[string]any, len(v))
				for k, e := range v {
					if k != "handler" {
						fields[k] = e
					}
				}
				rest, _ := json.Marshal(fields)
				dec := json.NewDecoder(bytes.NewReader(rest))
				dec.DisallowUnknownFields()
				var h Handler
				if err := dec.Decode(&h); err != nil {
					t.Errorf("handler JSON %s does not decode into Handler: %v", rest, err)
					return
				}
				back, _ := json.Marshal(&h)
				if normalizeJSON(t, back) != normalizeJSON(t, rest) {
					t.Errorf("handler JSON does not survive a decode/encode round trip:\n%s\n%s", rest, back)
				}
			}
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(cfg)
	if found == 0 {
		t.Errorf("adapted config has no webhook_idempotency handler")
	}
}

func indentJSON(t *testing.T, b []byte) string {
	t.Helper()
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "\t"); err != nil {
		t.Fatalf("indent %s: %v", b, err)
	}
	return out.String()
}

// normalizeJSON returns b re-encoded with sorted keys, so whitespace and key
// order do not matter.
func normalizeJSON(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("invalid JSON %q: %v", b, err)
	}
	out, _ := json.Marshal(v)
	return string(out)
}
