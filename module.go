package webhookidempotency

import (
	"github.com/caddyserver/caddy/v2"

	// the store backends register themselves in the
	// http.webhook_idempotency.stores namespace
	_ "github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
	_ "github.com/webhookguard/caddy-webhook-idempotency/store/memstore"
	_ "github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

// The module's registrations: the handler, the app, the admin API, and,
// by the imports above, the store backends (as caddy-l4's imports.go does).
// The Caddyfile directive and global option register in caddyfile.go.
func init() {
	caddy.RegisterModule(Handler{})
	caddy.RegisterModule(App{})
	caddy.RegisterModule(AdminAPI{})
}
