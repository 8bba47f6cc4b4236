package providers

import (
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Notion's deliveries as @notionhq/client signs and judges them
// (testdata/notion.json), and Notion's retry: the same event with a new
// attempt_number, other bytes under the same id.
func TestNotion(t *testing.T) {
	var vec struct {
		Secret  string
		Vectors []struct {
			Body, Signature string
			Verdict         bool
		}
	}
	nodeVectors(t, "notion", &vec)
	rt := route{secrets: []string{vec.Secret}}
	for _, v := range vec.Vectors {
		want := signature.ErrInvalid
		if v.Verdict {
			want = nil
		}
		rt.check(t, "notion", post("X-Notion-Signature", v.Signature), []byte(v.Body), want)
	}
	// the signature without its prefix is not Notion's
	first := vec.Vectors[0]
	rt.check(t, "notion", post("X-Notion-Signature", first.Signature[len("sha256="):]), []byte(first.Body), signature.ErrInvalid)
	// a retry is keyed on the event, not its bytes
	retry := vec.Vectors[3]
	if first.Body == retry.Body || keyOf(t, "notion", post(), []byte(first.Body)) != keyOf(t, "notion", post(), []byte(retry.Body)) ||
		keyOf(t, "notion", post(), []byte(first.Body)) == "" {
		t.Fatal("the two attempts of one event are not keyed alike")
	}
}
