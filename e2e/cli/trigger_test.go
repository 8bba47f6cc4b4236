package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	paddle "github.com/PaddleHQ/paddle-go-sdk/v4"
	"github.com/google/go-github/v72/github"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// exampleDir is where the repository keeps the example payloads the
// binary embeds.
const exampleDir = "../../providers/examples"

// triggerSecrets are the routes' secrets, one per preset with examples.
var triggerSecrets = map[string]string{
	"stripe": "whsec_trigger",
	"github": "gh-trigger",
	"paddle": "pdl_ntfset_trigger",
}

// freshMembers are the body members a trigger without --id sets anew, per
// preset (providers/examples/README.md), the delivery id's first.
var freshMembers = map[string][]string{
	"stripe": {"id", "created"},
	"paddle": {"notification_id", "event_id", "occurred_at"},
}

// checkWithProvider verifies what the application got with the provider's
// own library, as the application would: the signature and the event type.
func checkWithProvider(t *testing.T, preset, event string, r testkit.Received) {
	t.Helper()
	secret := triggerSecrets[preset]
	switch preset {
	case "stripe":
		ev, err := webhook.ConstructEvent(r.Body, r.Header.Get("Stripe-Signature"), secret)
		if err != nil || string(ev.Type) != event {
			t.Fatalf("stripe-go: %v (type %q)", err, ev.Type)
		}
	case "github":
		if err := github.ValidateSignature(r.Header.Get("X-Hub-Signature-256"), r.Body, []byte(secret)); err != nil {
			t.Fatalf("go-github: %v", err)
		}
		typ, _, _ := strings.Cut(event, ".")
		if got := r.Header.Get("X-GitHub-Event"); got != typ {
			t.Fatalf("X-GitHub-Event %q, want %q", got, typ)
		}
		if _, err := github.ParseWebHook(typ, r.Body); err != nil {
			t.Fatalf("go-github parses no %s: %v", typ, err)
		}
	case "paddle":
		req, _ := http.NewRequest(http.MethodPost, "http://app/", bytes.NewReader(r.Body))
		req.Header = r.Header.Clone()
		if ok, err := paddle.NewWebhookVerifier(secret).Verify(req); !ok || err != nil {
			t.Fatalf("paddle-go-sdk: %v %v", ok, err)
		}
		var n struct {
			EventType string `json:"event_type"`
		}
		if err := json.Unmarshal(r.Body, &n); err != nil || n.EventType != event {
			t.Fatalf("paddle event_type %q: %v", n.EventType, err)
		}
	default:
		t.Fatalf("no provider library checks %s", preset)
	}
}

// withoutMembers is a JSON body decoded, without the top-level members.
func withoutMembers(t *testing.T, body []byte, members []string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("body: %v", err)
	}
	for _, k := range members {
		delete(m, k)
	}
	return m
}

// TestTriggerEveryExample: `trigger list` names the presets with examples
// and `trigger <preset> list` their event types; every example, triggered
// at a real route configured as the docs say, is verified and delivered
// once; the application gets the published payload (byte for byte when
// the provider's bodies carry no delivery id, else with only the members
// a provider sets per event made anew), which the provider's own library
// verifies and parses; --id sends the same delivery again, which is
// replayed.
func TestTriggerEveryExample(t *testing.T) {
	app := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	var site strings.Builder
	fmt.Fprintf(&site, "http://127.0.0.1:%d {\n", port)
	for _, p := range slices.Sorted(func(yield func(string) bool) {
		for p := range triggerSecrets {
			if !yield(p) {
				return
			}
		}
	}) {
		fmt.Fprintf(&site, "\thandle /%s {\n\t\twebhook_idempotency %s {\n\t\t\tsecret %s\n\t\t}\n\t\treverse_proxy %s\n\t}\n", p, p, triggerSecrets[p], app.Addr())
	}
	site.WriteString("}\n")
	testkit.StartCaddy(t, "", site.String())
	base := testkit.SiteURL(port)

	list := mustCLI(t, "webhook-idempotency", "trigger", "list")
	var listed []string
	for _, line := range strings.Split(list, "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(line, "  ") {
			listed = append(listed, f[0])
		}
	}
	if !reflect.DeepEqual(listed, []string{"github", "paddle", "stripe"}) {
		t.Fatalf("trigger list:\n%s", list)
	}
	idLine := regexp.MustCompile(`delivery (\S+)\)`)
	for _, preset := range listed {
		out := mustCLI(t, "webhook-idempotency", "trigger", preset, "list")
		var events []string
		for _, line := range strings.Split(out, "\n") {
			if e, ok := strings.CutPrefix(line, "  "); ok {
				events = append(events, e)
			}
		}
		files, _ := filepath.Glob(filepath.Join(exampleDir, preset, "*.json"))
		if len(events) < 4 || len(events) != len(files) {
			t.Fatalf("trigger %s list names %d event types, the repository has %d files:\n%s", preset, len(events), len(files), out)
		}
		for _, event := range events {
			t.Run(preset+"/"+event, func(t *testing.T) {
				published, err := os.ReadFile(filepath.Join(exampleDir, preset, event+".json"))
				if err != nil {
					t.Fatal(err)
				}
				url := base + "/" + preset
				before := len(app.Requests())
				out := mustCLI(t, "webhook-idempotency", "trigger", preset, event, "--url", url, "--secret", triggerSecrets[preset])
				if !strings.Contains(out, "200 OK") || !strings.Contains(out, "> POST "+url+" ("+preset+" "+event+", delivery ") {
					t.Fatalf("output:\n%s", out)
				}
				id := idLine.FindStringSubmatch(out)[1]
				got := app.Requests()[before:]
				if len(got) != 1 {
					t.Fatalf("the application got %d requests:\n%s", len(got), out)
				}
				r := got[0]
				checkWithProvider(t, preset, event, r)
				fresh := freshMembers[preset]
				if fresh == nil {
					if !bytes.Equal(r.Body, published) {
						t.Fatalf("the application got another body than the published one:\n%s", r.Body)
					}
					if r.Header.Get("X-GitHub-Delivery") != id {
						t.Fatalf("X-GitHub-Delivery %q, the command said %s", r.Header.Get("X-GitHub-Delivery"), id)
					}
				} else {
					if !reflect.DeepEqual(withoutMembers(t, r.Body, fresh), withoutMembers(t, published, fresh)) {
						t.Fatalf("the application got more changed than %v:\n%s", fresh, r.Body)
					}
					var sent, pub map[string]any
					_ = json.Unmarshal(r.Body, &sent)
					_ = json.Unmarshal(published, &pub)
					if sent[fresh[0]] != id {
						t.Fatalf("%s is %v, the command said %s", fresh[0], sent[fresh[0]], id)
					}
					for _, k := range fresh {
						if reflect.DeepEqual(sent[k], pub[k]) {
							t.Fatalf("%s was sent as published (%v): a second trigger would not be a new event", k, pub[k])
						}
					}
				}

				// the same delivery, by its id: byte for byte the same
				// body each time, the second replayed
				again := mustCLI(t, "webhook-idempotency", "trigger", preset, event, "--url", url, "--secret", triggerSecrets[preset], "--id", "trigger-"+id)
				replay := mustCLI(t, "webhook-idempotency", "trigger", preset, event, "--url", url, "--secret", triggerSecrets[preset], "--id", "trigger-"+id)
				if strings.Contains(again, "replayed: a duplicate") || !strings.Contains(replay, "replayed: a duplicate") {
					t.Fatalf("--id twice:\n%s\n%s", again, replay)
				}
				got = app.Requests()[before:]
				if len(got) != 2 {
					t.Fatalf("the application got %d requests, want 2 (the replay answered by the route)", len(got))
				}
				checkWithProvider(t, preset, event, got[1])
				if fresh != nil && !reflect.DeepEqual(withoutMembers(t, got[1].Body, fresh[:1]), withoutMembers(t, published, fresh[:1])) {
					t.Fatalf("with --id, more than %s changed:\n%s", fresh[0], got[1].Body)
				}
			})
		}
	}

	// a trigger that cannot be made is one sentence on stderr, exit 1
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"stripe", "no.such.event", "--url", base + "/stripe", "--secret", "x"}, `Error: no stripe example of event type "no.such.event": want one of charge.dispute.created,`},
		{[]string{"twilio", "list"}, "Error: no example payloads of twilio are embedded: the presets with examples are github, paddle, stripe"},
		{[]string{"stripe"}, "Error: name the event type: caddy webhook-idempotency trigger stripe <event type> --url …"},
		{[]string{"stripe", "customer.created"}, "Error: --url is required"},
	} {
		cmd := testkit.CaddyCommand(append([]string{"webhook-idempotency", "trigger"}, tc.args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if cmd.ProcessState.ExitCode() != 1 || len(lines) != 1 || !strings.HasPrefix(lines[0], tc.want) {
			t.Errorf("trigger %s: %v, stderr:\n%s\nwant one line starting %q", strings.Join(tc.args, " "), err, stderr.String(), tc.want)
		}
	}
}
