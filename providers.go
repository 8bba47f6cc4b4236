package webhookidempotency

// provider is a preset of SPEC §5: a source name, a verification scheme and
// a stable default key. This table is the one place that knows providers.
type provider struct {
	// defaultKey is the key chain used when the handler sets none; it
	// always ends with body.
	defaultKey []string
}

// providers maps each preset name to its preset.
var providers = map[string]provider{
	"stripe":      {defaultKey: []string{"json:id", "body"}},
	"github":      {defaultKey: []string{"header:X-GitHub-Delivery", "body"}},
	"shopify":     {defaultKey: []string{"header:X-Shopify-Webhook-Id", "body"}},
	"slack":       {defaultKey: []string{"json:event_id", "body"}},
	"standard":    {defaultKey: []string{"header:webhook-id", "body"}},
	"svix":        {defaultKey: []string{"header:svix-id", "body"}},
	"whatsapp":    {defaultKey: []string{"body"}},
	"ifood":       {defaultKey: []string{"json:id", "body"}},
	"mercadopago": {defaultKey: []string{"header:x-request-id", "body"}},
	"pagbank":     {defaultKey: []string{"body"}},
	"paddle":      {defaultKey: []string{"json:notification_id", "body"}},
	"twilio":      {defaultKey: []string{"header:I-Twilio-Idempotency-Token", "body"}},
	"square":      {defaultKey: []string{"json:event_id", "body"}},
	"gitlab":      {defaultKey: []string{"header:Idempotency-Key", "body"}},
	"stone":       {defaultKey: []string{"header:x-stone-webhook-event-id", "body"}},
	"evolution":   {defaultKey: []string{"body"}},
}
