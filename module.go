package webhookidempotency

import (
	"github.com/caddyserver/caddy/v2"

	// the operator surface: the admin API module and the commands
	_ "github.com/webhookguard/caddy-webhook-idempotency/internal/admin"

	// the store backends register themselves in the
	// http.webhook_idempotency.stores namespace
	_ "github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
	_ "github.com/webhookguard/caddy-webhook-idempotency/store/memstore"
	_ "github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

// The module's registrations: the handler and the app and, by the imports
// above, the admin API and the commands, and the store backends (as
// caddy-l4's imports.go does).
// The Caddyfile directive and global option register in caddyfile.go.
func init() {
	caddy.RegisterModule(Handler{})
	caddy.RegisterModule(App{})
}
