package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// TestGitHubLargePushAndRefusals: a 6 MB GitHub push, over the old 5MiB
// default but within GitHub's documented 25 MB cap, reaches the
// application byte for byte; a forged delivery and one over the preset's
// max_body are listed among the source's refusals with their reason and
// delivery id, through the admin API.
func TestGitHubLargePushAndRefusals(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	source := fmt.Sprintf("gh_large_%d", time.Now().UnixNano())
	c := testkit.StartCaddy(t, "", testkit.ProxySite(port, `webhook_idempotency github {
		source `+source+`
		secret gh-large-secret
		store memory
	}`, up))
	url := testkit.SiteURL(port) + "/gh"
	signer, err := providers.NewSigner("github", providers.SignConfig{Secret: "gh-large-secret"})
	if err != nil {
		t.Fatal(err)
	}
	send := func(body []byte, delivery string, sign bool) int {
		req, _ := http.NewRequest(http.MethodPost, url, nil)
		req.Header.Set("X-GitHub-Delivery", delivery)
		if sign {
			if _, err := signer.Sign(req, body, time.Now()); err != nil {
				t.Fatal(err)
			}
		} else {
			req.Header.Set("X-Hub-Signature-256", "sha256=00")
		}
		var pairs []string
		for name, vs := range req.Header {
			pairs = append(pairs, name, vs[0])
		}
		resp, _ := testkit.Post(t, url, body, pairs...)
		return resp.StatusCode
	}
	push := []byte(`{"ref":"refs/heads/main","commits":"` + strings.Repeat("a", 6<<20) + `"}`)
	if status := send(push, "guid-large", true); status != http.StatusOK {
		t.Fatalf("a 6 MB push: %d", status)
	}
	if got := up.Requests(); len(got) != 1 || !bytes.Equal(got[0].Body, push) {
		t.Fatalf("the application got %d requests", len(got))
	}
	if status := send([]byte(`{"forged":true}`), "guid-forged", false); status != http.StatusUnauthorized {
		t.Fatalf("a forgery: %d", status)
	}
	huge := []byte(`{"x":"` + strings.Repeat("b", 26<<20) + `"}`)
	if status := send(huge, "guid-huge", true); status != http.StatusRequestEntityTooLarge {
		t.Fatalf("over 25MiB: %d", status)
	}
	var list struct {
		Refused []struct {
			Key, Result, Reason string
			Status              int
		} `json:"refused"`
	}
	testkit.WaitFor(t, 10*time.Second, "two refusals listed", func() (bool, string) {
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/"+source+"/refused", &list)
		return len(list.Refused) == 2, fmt.Sprint(list.Refused)
	})
	byKey := map[string]string{}
	for _, r := range list.Refused {
		byKey[r.Key] = fmt.Sprintf("%s %d %s", r.Result, r.Status, r.Reason)
	}
	if byKey["guid-forged"] != "invalid_signature 401 invalid signature" || !strings.HasPrefix(byKey["guid-huge"], "too_large 413 too large: 27 MB > 25 MiB") {
		t.Fatalf("refusals: %v", byKey)
	}
}
