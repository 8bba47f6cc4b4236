package admin

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// `caddy webhook-idempotency send <preset>`: a delivery signed as the
// preset's provider signs it (providers_sign.go), sent to a route, its
// answer printed with whether it was replayed; with --retry the same
// delivery again, signed anew as the provider signs a retry.

// sendTimeout bounds one delivery.
const sendTimeout = 30 * time.Second

// sendBodyLimit bounds the answer body printed.
const sendBodyLimit = 4 << 10

// sendFlags are the flags of the send command.
type sendFlags struct {
	preset, url, id, method string
	body                    []byte
	bodyGiven               bool
	headers                 http.Header
	retry                   bool
	cfg                     providers.SignConfig
}

// cmdSend signs and sends a delivery.
func cmdSend(fl caddycmd.Flags) (int, error) {
	preset := fl.Arg(0)
	if preset == "" || preset == "list" {
		printPresets(os.Stdout)
		if preset == "" {
			return caddy.ExitCodeFailedStartup, errors.New("name the preset to sign as: caddy webhook-idempotency send <preset> --url … --secret …")
		}
		return caddy.ExitCodeSuccess, nil
	}
	sf, err := readSendFlags(fl, preset)
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	if sf.id == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		sf.id = "evt_" + hex.EncodeToString(b[:])
	}
	return deliver(sf, newDelivery(sf))
}

// deliver signs and sends a delivery, and with --retry sends it again and
// expects a replay.
func deliver(sf *sendFlags, d *delivery) (int, error) {
	signer, err := providers.NewSigner(sf.preset, sf.cfg)
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	client := &http.Client{Timeout: sendTimeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	out := os.Stdout
	first, err := d.send(client, signer, out, "")
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	if !sf.retry {
		if first.StatusCode < 200 || first.StatusCode > 299 {
			return caddy.ExitCodeFailedStartup, fmt.Errorf("the delivery was answered %s", first.Status)
		}
		return caddy.ExitCodeSuccess, nil
	}
	second, err := d.send(client, signer, out, "the same delivery again, signed anew as a provider signs its retry")
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	if second.Header.Get(record.ReplayedHeader) != "true" {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("the retry was not replayed (answered %s): the route did not deduplicate it", second.Status)
	}
	return caddy.ExitCodeSuccess, nil
}

// readSendFlags reads the flags of the send and trigger commands.
func readSendFlags(fl caddycmd.Flags, preset string) (*sendFlags, error) {
	sf := &sendFlags{
		preset: preset, url: fl.String("url"), id: fl.String("id"), method: strings.ToUpper(fl.String("method")),
		retry: fl.Bool("retry"), headers: http.Header{},
		cfg: providers.SignConfig{
			Secret: fl.String("secret"), KeyID: fl.String("kid"),
			PublicURL: fl.String("public-url"), TokenHeader: fl.String("token-header"),
			WebhookID: fl.String("webhook-id"), TokenQuery: fl.String("token-query"),
		},
	}
	if sf.url == "" {
		return nil, errors.New("--url is required: the URL of the route, such as http://localhost:8080/webhooks/stripe")
	}
	if !strings.HasPrefix(sf.url, "http://") && !strings.HasPrefix(sf.url, "https://") {
		return nil, fmt.Errorf("--url %q: want an http:// or https:// URL", sf.url)
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"private-key", &sf.cfg.PrivateKey}, {"encrypt-to", &sf.cfg.EncryptTo}} {
		if file := fl.String(f.name); file != "" {
			b, err := os.ReadFile(file)
			if err != nil {
				return nil, fmt.Errorf("--%s: %v", f.name, err)
			}
			*f.dst = string(b)
		}
	}
	if fl.Lookup("body") != nil {
		if v := fl.String("body"); v != "" {
			sf.bodyGiven = true
			if file, ok := strings.CutPrefix(v, "@"); ok {
				b, err := os.ReadFile(file)
				if err != nil {
					return nil, fmt.Errorf("--body: %v", err)
				}
				sf.body = b
			} else {
				sf.body = []byte(v)
			}
		}
	}
	claims, err := fl.GetStringArray("claim")
	if err != nil {
		return nil, err
	}
	for _, c := range claims {
		name, value, ok := strings.Cut(c, "=")
		if !ok || strings.TrimSpace(name) == "" {
			return nil, fmt.Errorf("--claim %q: want name=value", c)
		}
		if sf.cfg.Claims == nil {
			sf.cfg.Claims = map[string]string{}
		}
		sf.cfg.Claims[strings.TrimSpace(name)] = value
	}
	headers, err := fl.GetStringArray("header")
	if err != nil {
		return nil, err
	}
	for _, line := range headers {
		name, value, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(name) == "" {
			return nil, fmt.Errorf("--header %q: want Name: value", line)
		}
		sf.headers.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	return sf, nil
}

// delivery is one delivery to send, and send again with --retry.
type delivery struct {
	flags   *sendFlags
	event   string // the example's event type, for trigger
	body    []byte
	headers http.Header
}

// newDelivery lays out the delivery: the preset's key is the delivery id,
// in the header the preset keys on first (its default key chain), or in
// the JSON body the command makes up when none is given.
func newDelivery(sf *sendFlags) *delivery {
	d := &delivery{flags: sf, headers: sf.headers.Clone()}
	header, jsonKey := providers.IDPlace(sf.preset)
	if header != "" && d.headers.Get(header) == "" {
		d.headers.Set(header, sf.id)
	}
	d.body = sf.body
	if !sf.bodyGiven {
		d.body = defaultBody(sf.preset, sf.id, jsonKey)
	}
	if d.headers.Get("Content-Type") == "" && json.Valid(d.body) {
		d.headers.Set("Content-Type", "application/json")
	}
	return d
}

// defaultBody is the made-up event of a delivery: its id, in `id` and at
// the preset's JSON key when it has one.
func defaultBody(preset, id, jsonKey string) []byte {
	event := map[string]any{
		"id":      id,
		"type":    "webhook_idempotency.test",
		"created": time.Now().Unix(),
		"data":    map[string]any{"sent_by": "caddy webhook-idempotency send " + preset},
	}
	if jsonKey != "" && jsonKey != "id" {
		setJSONPath(event, strings.Split(jsonKey, "."), id)
	}
	b, _ := json.Marshal(event)
	return b
}

// setJSONPath sets a dotted path of objects to v, making the objects it
// needs; a path through something else is left alone.
func setJSONPath(m map[string]any, path []string, v any) {
	for i, name := range path {
		if i == len(path)-1 {
			m[name] = v
			return
		}
		next, ok := m[name].(map[string]any)
		if !ok {
			if _, taken := m[name]; taken {
				return
			}
			next = map[string]any{}
			m[name] = next
		}
		m = next
	}
}

// send signs and sends the delivery once and prints its answer.
func (d *delivery) send(client *http.Client, signer signature.Signer, out io.Writer, what string) (*http.Response, error) {
	req, err := http.NewRequest(d.flags.method, d.flags.url, nil)
	if err != nil {
		return nil, fmt.Errorf("--url: %v", err)
	}
	req.Header = d.headers.Clone()
	req.Header.Set("User-Agent", "caddy-webhook-idempotency-send")
	body, err := signer.Sign(req, d.body, time.Now())
	if err != nil {
		return nil, fmt.Errorf("signing as %s: %v", d.flags.preset, err)
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	if what != "" {
		fmt.Fprintf(out, "\n%s:\n", what)
	}
	sender := d.flags.preset
	if d.event != "" {
		sender += " " + d.event
	}
	fmt.Fprintf(out, "> %s %s (%s, delivery %s)\n", req.Method, req.URL, sender, d.flags.id)
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("sending the delivery: %v", err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, sendBodyLimit+1))
	fmt.Fprintf(out, "< %s: %s\n", resp.Status, verdict(resp))
	for _, name := range []string{"Content-Type", record.ReplayedHeader, ResultHeader, "Retry-After"} {
		if v := resp.Header.Get(name); v != "" {
			fmt.Fprintf(out, "< %s: %s\n", name, v)
		}
	}
	if len(answer) > sendBodyLimit {
		answer = append(answer[:sendBodyLimit], "…"...)
	}
	if len(answer) > 0 {
		fmt.Fprintf(out, "%s\n", bytes.TrimRight(answer, "\n"))
	}
	return resp, nil
}

// ResultHeader is the response header a route can be configured to answer
// with the request's result, the value of {http.webhook_idempotency.result}
// (docs/operating.md: send): without it, an answer the application gave
// cannot tell a new delivery from one passed on without deduplication.
const ResultHeader = "Webhook-Idempotency-Result"

// verdict says what an answer means for the delivery.
func verdict(resp *http.Response) string {
	result := resp.Header.Get(ResultHeader)
	switch {
	case resp.Header.Get(record.ReplayedHeader) == "true":
		return "replayed: a duplicate, answered from the store without calling the application"
	case result == results.Bypassed:
		return "bypassed: passed on WITHOUT deduplication (the store failed and the route fails open): a retry of it is processed again"
	case resp.StatusCode == http.StatusUnauthorized:
		return "refused: the signature did not verify (is the secret the route's?)"
	case resp.StatusCode == http.StatusConflict:
		return "conflict: the same delivery is being processed (in flight)"
	case resp.StatusCode == http.StatusUnprocessableEntity:
		return "refused: the key was seen with another body (mismatch reject)"
	case result == results.Unavailable:
		return "unavailable: the store failed and the route fails closed; the provider retries later"
	case resp.StatusCode == http.StatusServiceUnavailable:
		return "unavailable: retry later"
	case result == results.New:
		return "new: processed as a new delivery"
	case resp.StatusCode >= 200 && resp.StatusCode <= 299 && result == "":
		return "not replayed: the application answered it (whether as a new delivery or passed on without deduplication, the route does not say: docs/operating.md, send)"
	}
	if result != "" {
		return "not replayed: " + result
	}
	return "not replayed"
}

// printPresets lists the presets and what each signs with.
func printPresets(w io.Writer) {
	fmt.Fprintln(w, "presets and the key material they sign with:")
	for _, name := range providers.Names() {
		needs := providers.SignerNeeds(name)
		if needs == "" {
			needs = "cannot be signed by this command"
		}
		fmt.Fprintf(w, "  %-18s %s\n", name, needs)
	}
}

// sendHelp is the long help of the send command.
var sendHelp = `
Signs a delivery as the preset's provider signs it and sends it to a
route, then prints the answer and whether it was replayed. With --retry it
sends the same delivery a second time, signed anew as the provider signs a
retry, and fails unless that one is replayed.

The delivery id (--id, or a random evt_…) goes where the preset looks for
its key: the first header of its default key chain (X-GitHub-Delivery,
webhook-id, …), else the JSON body's key path. Without --body the body is a
made-up JSON event that carries the id.

Presets that sign with a key only the provider holds (discord, woovi,
stone, standard/svix v1a) take a private key whose public half the route
is configured with. ` + "`send list`" + ` lists the presets and what each needs.

  --url           the route's URL (required)
  --secret        the shared secret, as in the route's secret
  --private-key   a file with a private key (PEM, hex or base64)
  --encrypt-to    stone: a file with the partner's RSA public key
  --kid           stone: the kid of the signing key in the route's key set
  --public-url    twilio, square, hubspot: the URL the provider signs (the
                  route's url), when it is not --url
  --token-header  evolution: send the secret as a token in this header
                  instead of a JWT; eventgrid: the header of its key
  --token-query   eventgrid: the query parameter of its key
  --webhook-id    paypal: the webhook id PayPal signs (the route's
                  webhook_id)
  --claim         pubsub: a claim of the token, name=value (repeatable),
                  beside the issuer and email_verified: the route's
                  service account, email=<name>@<project>.iam.gserviceaccount.com;
                  the audience is --public-url, else --url
  --body          the body: @file, or the text itself
  --header        an extra header, "Name: value" (repeatable)
  --id            the delivery id (default: a random evt_…)
  --method        the method (default POST)
  --retry         send the delivery again and expect a replay
`

// newSendCommand is the send command.
func newSendCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "send <preset> --url <url> [--secret <secret>] [--body @file] [--retry]",
		Short: "Signs a delivery as a provider does, sends it and shows whether it was replayed",
		Long:  sendHelp,
		Args:  cobra.MaximumNArgs(1),
		RunE:  commandFunc(cmdSend),
	}
	deliveryFlags(cmd)
	cmd.Flags().String("body", "", "The body: @file, or the text itself")
	return cmd
}

// deliveryFlags adds the flags of the send and trigger commands: where to,
// what to sign with, and what to add.
func deliveryFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.String("url", "", "The route's URL")
	f.String("secret", "", "The shared secret")
	f.String("private-key", "", "A file with a private key")
	f.String("encrypt-to", "", "stone: a file with the partner's RSA public key")
	f.String("kid", "", "stone: the signing key's kid")
	f.String("public-url", "", "The URL the provider signs, when it is not --url")
	f.String("token-header", "", "evolution, eventgrid: send the secret as a token in this header")
	f.String("token-query", "", "eventgrid: send the secret in this query parameter")
	f.String("webhook-id", "", "paypal: the webhook id PayPal signs (the route's webhook_id)")
	f.StringArray("claim", nil, "pubsub: a claim of the token, name=value (repeatable)")
	f.StringArray("header", nil, "An extra header, Name: value (repeatable)")
	f.String("id", "", "The delivery id")
	f.String("method", http.MethodPost, "The method")
	f.Bool("retry", false, "Send the delivery again and expect a replay")
}
