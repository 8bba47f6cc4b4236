package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// What Caddy's logs hold of the handler's work, read from the log files a
// Caddyfile writes.

// Distinctive strings that must never reach a log line.
const (
	logSecret      = "logsecret-7f1e2a9c"
	logTokenSecret = "logtoken-c40ffee1"
	logBodyCanary  = "BODYCANARY-91ab3d"
)

// accessLine finds the access-log line of the request carrying id in its
// X-Test-Id header.
func accessLine(lines []map[string]any, id string) (map[string]any, int) {
	var found map[string]any
	n := 0
	for _, l := range lines {
		req, _ := l["request"].(map[string]any)
		headers, _ := req["headers"].(map[string]any)
		vals, _ := headers["X-Test-Id"].([]any)
		if len(vals) == 1 && vals[0] == id {
			found = l
			n++
		}
	}
	return found, n
}

// The access log carries the source, the result and the key of every
// request (no key on a request rejected before its key is resolved, and a
// body's hash, not the body, when the key comes from the body); neither
// the access log nor every logger at DEBUG holds a secret, a token or a
// body.
func TestLogsAccessFieldsAndNoSecrets(t *testing.T) {
	dir := t.TempDir()
	accessLog := filepath.Join(dir, "access.log")
	allLog := filepath.Join(dir, "all.log")
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	// every logger, at DEBUG, to one file; the site's access log to
	// another. A `verify token` secret travels in a request header, which
	// Caddy logs verbatim (it only redacts Authorization and cookies): the
	// filter that the README prescribes (Log fields) deletes it. The hmac route
	// needs no filter.
	globals := fmt.Sprintf(`log everything {
		output file %s
		format filter {
			wrap json
			request>headers>X-Token delete
		}
		level DEBUG
	}`, allLog)
	testkit.StartCaddy(t, globals, fmt.Sprintf(`:%d {
	log {
		output file %s
		format filter {
			wrap json
			request>headers>X-Token delete
		}
	}
	handle /signed* {
		webhook_idempotency {
			source logs_signed
			verify hmac {
				header X-Sig
				secret %s
			}
		}
		reverse_proxy %s
	}
	handle /token* {
		webhook_idempotency {
			source logs_token
			verify token {
				header X-Token
				secret %s
			}
		}
		reverse_proxy %[4]s
	}
}`, port, accessLog, logSecret, up.Addr(), logTokenSecret))
	base := testkit.SiteURL(port)
	stamp := strconv.FormatInt(time.Now().UnixNano(), 10)
	body := func(i int) []byte { return []byte(`{"event":"` + logBodyCanary + `","n":` + strconv.Itoa(i) + `}`) }

	type sent struct {
		id, source, key, result string
	}
	var requests []sent
	send := func(path string, b []byte, source, key, result string, want int, header ...string) {
		t.Helper()
		id := fmt.Sprintf("req-%d", len(requests))
		header = append(header, "X-Test-Id", id)
		if key != "" && !strings.HasPrefix(key, "sha256:") {
			header = append(header, "Idempotency-Key", key)
		}
		resp, rb := testkit.Post(t, base+path, b, header...)
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d %s, want %d", path, id, resp.StatusCode, rb, want)
		}
		requests = append(requests, sent{id, source, key, result})
	}

	k1 := "evt_logkey_" + stamp
	send("/signed", body(1), "logs_signed", k1, "new", http.StatusOK, "X-Sig", sigtest.HMACHex(logSecret, string(body(1))))
	send("/signed", body(1), "logs_signed", k1, "replayed", 200, "X-Sig", sigtest.HMACHex(logSecret, string(body(1))))
	send("/signed", body(2), "logs_signed", "", "invalid_signature", 401, "X-Sig", sigtest.HMACHex("wrong", string(body(2))))
	// no Idempotency-Key: the key comes from the body, and must not be it
	send("/signed", body(3), "logs_signed", "sha256:", "new", 200, "X-Sig", sigtest.HMACHex(logSecret, string(body(3))))
	k2 := "evt_logtoken_" + stamp
	send("/token", body(4), "logs_token", k2, "new", 200, "X-Token", logTokenSecret)
	send("/token", body(5), "logs_token", "", "invalid_signature", 401, "X-Token", "not-the-token")

	// access lines are written when each request ends; wait for them all
	var access []map[string]any
	testkit.WaitFor(t, 30*time.Second, "an access-log line for every request", func() (bool, string) {
		access = testkit.ReadLogLines(t, accessLog)
		var missing []string
		for _, r := range requests {
			if _, n := accessLine(access, r.id); n == 0 {
				missing = append(missing, r.id)
			}
		}
		return len(missing) == 0, fmt.Sprintf("no line for %v", missing)
	})
	for _, r := range requests {
		line, n := accessLine(access, r.id)
		if n != 1 {
			t.Fatalf("%d access-log lines for %s, want 1; access log:\n%s", n, r.id, testkit.ReadFile(t, accessLog))
		}
		if got := line["webhook_idempotency.source"]; got != r.source {
			t.Errorf("%s: webhook_idempotency.source %v, want %q; line: %v", r.id, got, r.source, line)
		}
		if got := line["webhook_idempotency.result"]; got != r.result {
			t.Errorf("%s: webhook_idempotency.result %v, want %q; line: %v", r.id, got, r.result, line)
		}
		gotKey, hasKey := line["webhook_idempotency.key"].(string)
		switch {
		case r.key == "":
			// rejected before a key is resolved
			if hasKey {
				t.Errorf("%s: a key %q on a rejected request", r.id, gotKey)
			}
		case r.key == "sha256:":
			if !hasKey || gotKey == "" {
				t.Errorf("%s: no key field; line: %v", r.id, line)
			}
		default:
			if gotKey != r.key {
				t.Errorf("%s: webhook_idempotency.key %q, want %q; line: %v", r.id, gotKey, r.key, line)
			}
		}
	}

	all := testkit.ReadFile(t, allLog)
	if !strings.Contains(all, `"handled delivery"`) {
		t.Fatalf("the DEBUG log has no handler line; is the capture working?\n%s", all)
	}
	if !strings.Contains(all, `"http.log.access`) {
		t.Fatalf("the DEBUG log has no access line; is the capture working?\n%s", all)
	}
	for name, text := range map[string]string{"access log": testkit.ReadFile(t, accessLog), "debug log": all} {
		for _, secret := range []string{logSecret, logTokenSecret, logBodyCanary} {
			if strings.Contains(text, secret) {
				t.Errorf("%s contains %q:\n%s", name, secret, linesWith(text, secret))
			}
		}
	}
	if t.Failed() {
		return
	}
	line, _ := accessLine(access, requests[0].id)
	example, _ := json.Marshal(line)
	t.Logf("example access-log line: %s", example)
}

// A request that two handlers of the module see (one route, two sources)
// has the fields once in its access-log line, with the last handler's
// values; a request whose method is not processed has its source and
// result, and no key.
func TestLogsFieldsOncePerRequest(t *testing.T) {
	dir := t.TempDir()
	accessLog := filepath.Join(dir, "access.log")
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	log {
		output file %s
	}
	route {
		webhook_idempotency {
			source logs_outer
		}
		webhook_idempotency {
			source logs_inner
		}
		reverse_proxy %s
	}
}`, port, accessLog, up.Addr()))
	base := testkit.SiteURL(port)
	key := "evt_twice_" + strconv.FormatInt(time.Now().UnixNano(), 10)
	if resp, b := testkit.Post(t, base+"/hook", []byte(`{}`), "Idempotency-Key", key, "X-Test-Id", "twice"); resp.StatusCode != http.StatusOK {
		t.Fatalf("delivery: %d %s", resp.StatusCode, b)
	}
	if r := testkit.Send(http.MethodGet, base+"/hook", nil, "X-Test-Id", "skipped"); r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("GET: %d %v", r.Status, r.Err)
	}

	raw := func(id string) string {
		for _, l := range strings.Split(testkit.ReadFile(t, accessLog), "\n") {
			if strings.Contains(l, `"X-Test-Id":["`+id+`"]`) {
				return l
			}
		}
		return ""
	}
	testkit.WaitFor(t, 30*time.Second, "both access-log lines", func() (bool, string) {
		return raw("twice") != "" && raw("skipped") != "", testkit.ReadFile(t, accessLog)
	})
	for _, id := range []string{"twice", "skipped"} {
		for _, field := range []string{"source", "result"} {
			if n := strings.Count(raw(id), `"webhook_idempotency.`+field+`"`); n != 1 {
				t.Fatalf("%s: webhook_idempotency.%s %d times in the line, want once: %s", id, field, n, raw(id))
			}
		}
	}
	access := testkit.ReadLogLines(t, accessLog)
	twice, _ := accessLine(access, "twice")
	if twice["webhook_idempotency.source"] != "logs_inner" || twice["webhook_idempotency.key"] != key || twice["webhook_idempotency.result"] != "new" {
		t.Fatalf("the line of a request two handlers saw: source %v, key %v, result %v; want logs_inner, %s, new (the last handler's)",
			twice["webhook_idempotency.source"], twice["webhook_idempotency.key"], twice["webhook_idempotency.result"], key)
	}
	skipped, _ := accessLine(access, "skipped")
	if _, hasKey := skipped["webhook_idempotency.key"]; hasKey || skipped["webhook_idempotency.result"] != "skipped" || skipped["webhook_idempotency.source"] != "logs_inner" {
		t.Fatalf("the line of a GET: %v; want source logs_inner, result skipped, no key", skipped)
	}
}
