package webhookidempotency

import (
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// provisionErr provisions h and returns the error, cleaning up.
func provisionErr(t *testing.T, h *Handler) error {
	t.Helper()
	ctx, cancel := testkit.NewContext(t)
	defer cancel()
	err := h.Provision(ctx)
	_ = h.Cleanup()
	return err
}

func TestKeyMaterialConfigErrors(t *testing.T) {
	edPub := hex.EncodeToString(sigtest.Ed25519Public("k"))
	rsaPEM := sigtest.PEMPublic(&sigtest.RSAKey("rsa-1").PublicKey)
	for _, c := range []struct {
		name string
		v    providers.VerifyConfig
		want string
	}{
		{"discord with a secret", providers.VerifyConfig{Scheme: "discord", Secrets: []string{"s"}}, "discord verifies with a public key: give public_key, not secret"},
		{"discord without a key", providers.VerifyConfig{Scheme: "discord"}, "discord verification needs at least one public_key (or `verify off`)"},
		{"stripe with a key", providers.VerifyConfig{Scheme: "stripe", Secrets: []string{"s"}, PublicKeys: []string{edPub}}, "stripe verifies with a shared secret: it takes no public_key"},
		{"standard without either", providers.VerifyConfig{Scheme: "standard"}, "standard verification needs at least one secret or public_key"},
		{"a bad key", providers.VerifyConfig{Scheme: "discord", PublicKeys: []string{edPub, "00ff"}}, "discord verification: public_key 2: not an Ed25519 public key"},
		{"an rsa key for ed25519", providers.VerifyConfig{Scheme: "ed25519", Header: "X-Sig", PublicKeys: []string{rsaPEM}}, "public_key 1: not an Ed25519 public key: the PKIX key is an RSA key"},
		{"an ed25519 key for woovi", providers.VerifyConfig{Scheme: "woovi", PublicKeys: []string{edPub}}, "woovi verification: public_key 1: not an RSA public key"},
		{"a bad whpk_ key for svix", providers.VerifyConfig{Scheme: "svix", PublicKeys: []string{"whpk_AAAA"}}, "public_key 1: not a Standard Webhooks public key"},
		{"an unset key placeholder", providers.VerifyConfig{Scheme: "discord", PublicKeys: []string{"{env.WEBHOOK_TEST_UNSET_KEY}"}}, "resolving public_key 1"},
		{"a missing key file", providers.VerifyConfig{Scheme: "discord", PublicKeys: []string{"{file./nonexistent/discord.pem}"}}, "resolving public_key 1"},
		{"ed25519 without header", providers.VerifyConfig{Scheme: "ed25519", PublicKeys: []string{edPub}}, "a header is required"},
		{"ed25519 with an algorithm", providers.VerifyConfig{Scheme: "ed25519", Header: "X", Algorithm: "sha256", PublicKeys: []string{edPub}}, "ed25519 takes no algorithm or padding"},
		{"rsa with sha1", providers.VerifyConfig{Scheme: "rsa", Header: "X", Algorithm: "sha1", PublicKeys: []string{rsaPEM}}, "invalid rsa algorithm 'sha1': want sha256 or sha512"},
		{"rsa with a bad padding", providers.VerifyConfig{Scheme: "rsa", Header: "X", Padding: "oaep", PublicKeys: []string{rsaPEM}}, "invalid padding 'oaep': want pkcs1 or pss"},
		{"rsa with a url", providers.VerifyConfig{Scheme: "rsa", Header: "X", URL: "https://a.example/", PublicKeys: []string{rsaPEM}}, "rsa signs no url"},
		{"hmac with a padding", providers.VerifyConfig{Scheme: "hmac", Header: "X", Padding: "pss", Secrets: []string{"s"}}, "hmac takes no padding"},
		{"a preset with a padding", providers.VerifyConfig{Scheme: "woovi", Padding: "pss"}, "the preset takes no padding"},
		{"a key for hmac", providers.VerifyConfig{Scheme: "hmac", Header: "X", Secrets: []string{"s"}, PublicKeys: []string{edPub}}, "hmac verifies with a shared secret: it takes no public_key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := c.v
			err := provisionErr(t, &Handler{Source: "keys", Verify: &v})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}

// deliver sends a signed delivery of c through a provisioned handler and
// returns what it answered and how often the next handler was called.
func deliver(t *testing.T, h *Handler, r *http.Request) (served, int64) {
	t.Helper()
	var calls atomic.Int64
	got := serveReq(h, r, countingNext(&calls))
	return got, calls.Load()
}

func TestKeyMaterialFromFilesAndPlaceholders(t *testing.T) {
	dir := t.TempDir()
	edFile := filepath.Join(dir, "discord.pem")
	if err := os.WriteFile(edFile, []byte(sigtest.PEMPublic(sigtest.Ed25519Public("discord-app-1"))), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("WEBHOOK_TEST_DISCORD_KEY", hex.EncodeToString(sigtest.Ed25519Public("discord-app-2")))
	h := newTestHandler(t, &Handler{Provider: "discord", Verify: &providers.VerifyConfig{
		PublicKeys: []string{"{file." + edFile + "}", "{env.WEBHOOK_TEST_DISCORD_KEY}"},
	}})
	for i, secret := range []string{"discord-app-1", "discord-app-2"} {
		body := []byte(`{"id":"cmd-` + secret + `","type":2}`)
		if got, calls := deliver(t, h, signedRequest(t, "discord", secret, "/discord", body)); got.result != results.New || calls != 1 {
			t.Fatalf("key %d: %q %d, %d calls", i+1, got.result, got.w.Code, calls)
		}
	}
	if got, _ := deliver(t, h, signedRequest(t, "discord", "discord-wrong", "/discord", []byte(`{"id":"x","type":2}`))); got.w.Code != http.StatusUnauthorized {
		t.Fatalf("other key: %d", got.w.Code)
	}
}

func TestKeyMaterialWooviPublishedKeyByDefault(t *testing.T) {
	h := newTestHandler(t, &Handler{Provider: "woovi"})
	payload, sig := wooviPublishedExample(t)
	r := httptest.NewRequest(http.MethodPost, "/woovi", strings.NewReader(payload))
	r.Header.Set("x-webhook-signature", sig)
	if got, calls := deliver(t, h, r); got.result != results.New || calls != 1 {
		t.Fatalf("Woovi's published example: %q %d %s, %d calls", got.result, got.w.Code, got.w.Body, calls)
	}
	// a key given replaces the published one
	other := newTestHandler(t, &Handler{Source: "woovi-own", Provider: "woovi", Verify: &providers.VerifyConfig{
		PublicKeys: []string{sigtest.PEMPublic(&sigtest.RSAKey("rsa-1").PublicKey)},
	}})
	r = httptest.NewRequest(http.MethodPost, "/woovi", strings.NewReader(payload))
	r.Header.Set("x-webhook-signature", sig)
	if got, _ := deliver(t, other, r); got.w.Code != http.StatusUnauthorized {
		t.Fatalf("own key: %d", got.w.Code)
	}
}

// wooviPublishedExample reads Woovi's example payload and signature from
// the signature package's tests, where their source is cited.
func wooviPublishedExample(t *testing.T) (payload, sig string) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("signature", "asymmetric_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	field := func(name string) string {
		_, rest, ok := strings.Cut(string(src), "\t"+name)
		if !ok {
			t.Fatalf("no %s in signature/asymmetric_test.go", name)
		}
		_, rest, _ = strings.Cut(rest, "= ")
		line, _, _ := strings.Cut(rest, "\n")
		return strings.Trim(line, "`\"")
	}
	return field("wooviPayload"), field("wooviSignature")
}

func TestKeyMaterialStandardMixesSecretsAndPublicKeys(t *testing.T) {
	whpk := sigtest.WHPK(sigtest.Ed25519Public("std-ed-1"))
	for i, v := range []*providers.VerifyConfig{
		// a whpk_ key as a secret, or as a public_key
		{Secrets: []string{sigtest.StdSecretA, whpk}},
		{Secrets: []string{sigtest.StdSecretA}, PublicKeys: []string{whpk}},
		{Secrets: []string{sigtest.StdSecretA}, PublicKeys: []string{sigtest.PEMPublic(sigtest.Ed25519Public("std-ed-1"))}},
	} {
		h := newTestHandler(t, &Handler{Source: "svix-" + strconv.Itoa(i), Provider: "svix", Verify: v})
		std := sigtest.StandardCase("svix", "svix-")
		hmacSigned := std.Delivery(t, sigtest.StdSecretA, time.Now())
		if got, calls := deliver(t, h, hmacSigned.Req); got.result != results.New || calls != 1 {
			t.Fatalf("%+v: v1: %q %d", v, got.result, got.w.Code)
		}
		d := sigtest.NewDelivery("/svix", []byte(`{"type":"user.created"}`), time.Now())
		sigtest.SignStandardV1a(d, "svix-", "msg_v1a", sigtest.Ed25519Key("std-ed-1"))
		if got, calls := deliver(t, h, d.Req); got.result != results.New || calls != 1 {
			t.Fatalf("%+v: v1a: %q %d", v, got.result, got.w.Code)
		}
		forged := sigtest.NewDelivery("/svix", []byte(`{"type":"user.created"}`), time.Now())
		sigtest.SignStandardV1a(forged, "svix-", "msg_forged", sigtest.Ed25519Key("std-ed-2"))
		if got, _ := deliver(t, h, forged.Req); got.w.Code != http.StatusUnauthorized {
			t.Fatalf("%+v: forged v1a: %d", v, got.w.Code)
		}
	}
}

func TestKeyMaterialPresetTolerances(t *testing.T) {
	cases := map[string]sigtest.Case{}
	for _, c := range sigtest.Cases() {
		cases[c.Label()] = c
	}
	// Twitch's default is its own ten minutes
	twitch := cases["twitch"]
	h := newTestHandler(t, &Handler{Source: "twitch-tolerance", Provider: "twitch", Verify: &providers.VerifyConfig{Secrets: []string{twitch.Secrets[0]}}})
	if got, _ := deliver(t, h, twitch.Delivery(t, twitch.Secrets[0], time.Now().Add(-9*time.Minute)).Req); got.result != results.New {
		t.Fatalf("twitch, 9 minutes old: %q %d", got.result, got.w.Code)
	}
	if got, _ := deliver(t, h, twitch.Delivery(t, twitch.Secrets[0], time.Now().Add(-11*time.Minute)).Req); got.w.Code != http.StatusUnauthorized {
		t.Fatalf("twitch, 11 minutes old: %d", got.w.Code)
	}
	// Linear's signed webhookTimestamp is checked only with a tolerance
	linear := cases["linear"]
	old := linear.Delivery(t, linear.Secrets[0], time.Now().Add(-time.Hour))
	lax := newTestHandler(t, &Handler{Source: "linear-lax", Provider: "linear", Verify: &providers.VerifyConfig{Secrets: []string{linear.Secrets[0]}}})
	if got, _ := deliver(t, lax, old.Req); got.result != results.New {
		t.Fatalf("linear without tolerance: %q %d", got.result, got.w.Code)
	}
	strict := newTestHandler(t, &Handler{Source: "linear-strict", Provider: "linear", Verify: &providers.VerifyConfig{Secrets: []string{linear.Secrets[0]}, Tolerance: 60e9}})
	old = linear.Delivery(t, linear.Secrets[0], time.Now().Add(-time.Hour))
	if got, _ := deliver(t, strict, old.Req); got.w.Code != http.StatusUnauthorized || !strings.Contains(got.w.Body.String(), signature.ErrTimestamp.Reason) {
		t.Fatalf("linear with tolerance: %d %s", got.w.Code, got.w.Body)
	}
}
