package webhookidempotency

import (
	"encoding/hex"
	"reflect"
	"strings"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

func TestCaddyfileParseKeysAndHandshakes(t *testing.T) {
	edHex := hex.EncodeToString(sigtest.Ed25519Public("caddyfile"))
	whpk := sigtest.WHPK(sigtest.Ed25519Public("caddyfile"))
	for _, tc := range []struct {
		name  string
		input string
		want  Handler
	}{
		{
			name:  "whatsapp verify_token and handshake inline",
			input: `webhook_idempotency whatsapp verify_token {env.WA_VERIFY_TOKEN} handshake on secret {env.META_APP_SECRET}`,
			want:  Handler{Provider: "whatsapp", VerifyToken: "{env.WA_VERIFY_TOKEN}", Handshake: "on", Verify: &providers.VerifyConfig{Secrets: []string{"{env.META_APP_SECRET}"}}},
		},
		{
			name:  "handshake off in the block",
			input: "webhook_idempotency slack {\n\tsecret s\n\thandshake off\n}",
			want:  Handler{Provider: "slack", Handshake: "off", Verify: &providers.VerifyConfig{Secrets: []string{"s"}}},
		},
		{
			name:  "discord public key at the top of the block",
			input: "webhook_idempotency discord {\n\tpublic_key " + edHex + " {file./run/keys/discord-next.pem}\n}",
			want:  Handler{Provider: "discord", Verify: &providers.VerifyConfig{PublicKeys: []string{edHex, "{file./run/keys/discord-next.pem}"}}},
		},
		{
			name:  "svix mixing a secret and a public key",
			input: "webhook_idempotency svix {\n\tsecret whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n\tpublic_key " + whpk + "\n}",
			want:  Handler{Provider: "svix", Verify: &providers.VerifyConfig{Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, PublicKeys: []string{whpk}}},
		},
		{
			name: "verify rsa block",
			input: `webhook_idempotency {
				source acme
				verify rsa {
					header     X-Signature
					algorithm  sha512
					padding    pss
					encoding   hex
					public_key {file./etc/keys/acme.pem}
				}
			}`,
			want: Handler{Source: "acme", Verify: &providers.VerifyConfig{Scheme: "rsa", Header: "X-Signature", Algorithm: "sha512", Padding: "pss", Encoding: "hex", PublicKeys: []string{"{file./etc/keys/acme.pem}"}}},
		},
		{
			name:  "verify ed25519 block",
			input: "webhook_idempotency {\n\tsource acme\n\tverify ed25519 {\n\t\theader X-Sig\n\t\tencoding base64\n\t\tpublic_key " + edHex + "\n\t}\n}",
			want:  Handler{Source: "acme", Verify: &providers.VerifyConfig{Scheme: "ed25519", Header: "X-Sig", Encoding: "base64", PublicKeys: []string{edHex}}},
		},
		{
			name:  "woovi without a key",
			input: `webhook_idempotency woovi`,
			want:  Handler{Provider: "woovi"},
		},
		{
			name:  "hubspot with its url",
			input: "webhook_idempotency hubspot {\n\tverify {\n\t\tsecret {env.HUBSPOT_CLIENT_SECRET}\n\t\turl https://hooks.example.com/hubspot\n\t}\n}",
			want:  Handler{Provider: "hubspot", Verify: &providers.VerifyConfig{Secrets: []string{"{env.HUBSPOT_CLIENT_SECRET}"}, URL: "https://hooks.example.com/hubspot"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := parseTestHandler(tc.input)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if !reflect.DeepEqual(*h, tc.want) {
				t.Fatalf("got  %s\nwant %s", handlerJSON(t, h), handlerJSON(t, &tc.want))
			}
		})
	}
}

func TestCaddyfileParseKeysAndHandshakesErrors(t *testing.T) {
	rsaPEM := strings.ReplaceAll(sigtest.PEMPublic(&sigtest.RSAKey("rsa-1").PublicKey), "\n", "")
	for _, tc := range []struct {
		name, input, want string
	}{
		{"public_key without value", "webhook_idempotency discord {\n\tpublic_key\n}", "'public_key' needs at least one value, at Testfile:2"},
		{"public_key bad for discord", "webhook_idempotency discord {\n\tpublic_key 00ff\n}", "invalid public_key 1 for discord: not an Ed25519 public key: want 32 bytes or a PKIX public key, at Testfile:2"},
		{"second public_key bad", "webhook_idempotency discord {\n\tpublic_key " + strings.Repeat("ab", 32) + "\n\tpublic_key nope!\n}", "invalid public_key 2 for discord: not an Ed25519 public key: want PEM, base64 or hex, at Testfile:3"},
		{"public_key on stripe", "webhook_idempotency stripe {\n\tpublic_key " + strings.Repeat("ab", 32) + "\n}", "invalid public_key 1 for stripe: the scheme verifies with a shared secret (give secret), at Testfile:2"},
		{"rsa public_key not rsa", "webhook_idempotency {\n\tverify rsa {\n\t\tpublic_key " + strings.Repeat("ab", 32) + "\n\t}\n}", "invalid public_key 1 for rsa: not an RSA public key: want a PKIX or PKCS #1 public key, at Testfile:3"},
		{"ed25519 public_key is rsa", "webhook_idempotency {\n\tverify ed25519 {\n\t\tpublic_key `" + rsaPEM + "`\n\t}\n}", "invalid public_key 1 for ed25519: not an Ed25519 public key: the PEM block does not decode, at Testfile:3"},
		{"padding bad", "webhook_idempotency {\n\tverify rsa {\n\t\tpadding oaep\n\t}\n}", "invalid padding 'oaep': want pkcs1 or pss, at Testfile:3"},
		{"padding missing", "webhook_idempotency {\n\tverify rsa {\n\t\tpadding\n\t}\n}", "verify 'padding' takes exactly one value, got 0, at Testfile:3"},
		{"verify_token on slack", "webhook_idempotency slack {\n\tverify_token t\n}", "verify_token is the token of Meta's subscription check (the whatsapp preset); the slack preset takes none, at Testfile:2"},
		{"verify_token two values", "webhook_idempotency whatsapp {\n\tverify_token a b\n}", "'verify_token' takes exactly one value, got 2, at Testfile:2"},
		{"verify_token inline without value", "webhook_idempotency whatsapp verify_token", "option 'verify_token' on the directive line needs a value, at Testfile:1"},
		{"handshake bad", "webhook_idempotency slack {\n\thandshake maybe\n}", "invalid handshake 'maybe': want on or off, at Testfile:2"},
		{"handshake on a preset without one", "webhook_idempotency stripe handshake off", "the stripe preset has no handshake to answer (" + strings.Join(providers.HandshakeProviders(), ", ") + " have one), at Testfile:1"},
		{"verify_token with handshake off", "webhook_idempotency whatsapp {\n\thandshake off\n\tverify_token t\n}", "verify_token is unused with 'handshake off', at Testfile:3"},
		{"webhook_id without value", "webhook_idempotency paypal {\n\tverify paypal {\n\t\twebhook_id\n\t}\n}", "verify 'webhook_id' takes exactly one value, got 0, at Testfile:3"},
		{"webhook_id with a space", "webhook_idempotency paypal {\n\tverify paypal {\n\t\twebhook_id \"WH 1\"\n\t}\n}", `invalid webhook_id "WH 1": a webhook id holds no spaces (PayPal's, in the app's webhook settings), at Testfile:3`},
		{"webhook_id on sendgrid", "webhook_idempotency sendgrid {\n\tverify sendgrid {\n\t\twebhook_id WH-1\n\t}\n}", "the sendgrid preset takes no webhook_id: its signature covers no webhook id (paypal's does), at Testfile:3"},
		{"unknown scheme names the generic ones", "webhook_idempotency {\n\tverify ecdsa\n}", "unknown verify scheme 'ecdsa': want a provider name, hmac, token, jwt, ed25519, rsa or off, at Testfile:2"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantParseError(t, tc.input, tc.want) })
	}
}
