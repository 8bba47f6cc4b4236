// Command caddy builds a Caddy with the standard modules plus webhook_idempotency.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	// plug in Caddy modules here
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/webhookguard/caddy-webhook-idempotency"
)

func main() {
	caddycmd.Main()
}
