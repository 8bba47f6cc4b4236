package edge

import (
	"crypto/x509/pkix"
	"fmt"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// pixCallback is a Pix callback as the API Pix documents it (bacen/pix-api,
// openapi.yaml, example pixWebhook2), and pixRefund the callback of a
// refund of that Pix reaching DEVOLVIDO: the same endToEndId.
const (
	pixCallback = `{"pix":[{"endToEndId":"E87654321202009091221dfghi123456","txid":"971122d8f37211eaadc10242ac120002","valor":"110.00","horario":"2020-09-09T20:15:00.358Z","infoPagador":"0123456789"}]}`
	pixRefund   = `{"pix":[{"endToEndId":"E87654321202009091221dfghi123456","txid":"971122d8f37211eaadc10242ac120002","valor":"110.00","horario":"2020-09-09T20:15:00.358Z","infoPagador":"0123456789","devolucoes":[{"id":"123ABC","rtrId":"D12345678202009091221abcdf098765","valor":"10.00","horario":{"solicitacao":"2020-09-09T20:15:00.358Z","liquidacao":"2020-09-09T20:16:00.000Z"},"status":"DEVOLVIDO"}]}]}`
)

// TestEdgePixMutualTLS: the pix preset with the PSP's CA: a callback
// without the PSP's certificate is refused, with it delivered once (its
// retry replayed), and the refund's callback, which repeats the Pix's
// endToEndId, is delivered too.
func TestEdgePixMutualTLS(t *testing.T) {
	serverCA, psp, other := testkit.NewCA(t, "Site CA"), testkit.NewCA(t, "PSP test CA"), testkit.NewCA(t, "Other CA")
	cert := psp.Client(t, pkix.Name{CommonName: "webhook.psp.test"})
	stranger := other.Client(t, pkix.Name{CommonName: "webhook.psp.test"})
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", mtlsSite(t, port, serverCA, []*testkit.CA{psp, other}, fmt.Sprintf(`webhook_idempotency pix {
		client_cert {
			ca %s
		}
	}`, psp.PEMFile), up))
	url := fmt.Sprintf("https://localhost:%d/webhook/pix", port)

	wantForbidden(t, post(t, tlsClient(serverCA, nil), url, pixCallback), "client certificate required")
	wantForbidden(t, post(t, tlsClient(serverCA, &stranger), url, pixCallback), "client certificate not accepted")
	up.WantCalls(t, 0)
	if r := post(t, tlsClient(serverCA, &cert), url, pixCallback); r.status != 200 || r.body != `{"call":1}` {
		t.Fatalf("the callback: %d %s", r.status, r.body)
	}
	if r := post(t, tlsClient(serverCA, &cert), url, pixCallback); r.status != 200 || r.header.Get(testkit.ReplayedHeader) != "true" {
		t.Fatalf("its retry: %d %v", r.status, r.header)
	}
	if r := post(t, tlsClient(serverCA, &cert), url, pixRefund); r.status != 200 || r.body != `{"call":2}` {
		t.Fatalf("the refund's callback: %d %s", r.status, r.body)
	}
	up.WantCalls(t, 2)
}
