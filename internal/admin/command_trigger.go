package admin

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// `caddy webhook-idempotency trigger <preset> <event type>`: one of the
// example payloads the provider publishes (providers/examples), signed as
// the provider signs it and sent as send sends a delivery.

// cmdTrigger sends a provider's example of an event type.
func cmdTrigger(fl caddycmd.Flags) (int, error) {
	preset, event := fl.Arg(0), fl.Arg(1)
	switch {
	case preset == "" || preset == "list":
		printExamplePresets(os.Stdout)
		if preset == "" {
			return caddy.ExitCodeFailedStartup, errors.New("name the preset and the event type: caddy webhook-idempotency trigger <preset> <event type> --url … --secret …")
		}
		return caddy.ExitCodeSuccess, nil
	case event == "" || event == "list":
		events := providers.ExampleEvents(preset)
		if events == nil {
			// the error names the presets that have examples
			_, err := providers.NewExample(preset, "", "", time.Time{})
			return caddy.ExitCodeFailedStartup, err
		}
		fmt.Printf("%s event types (providers/examples/README.md names their source):\n", preset)
		for _, e := range events {
			fmt.Printf("  %s\n", e)
		}
		if event == "" {
			return caddy.ExitCodeFailedStartup, fmt.Errorf("name the event type: caddy webhook-idempotency trigger %s <event type> --url …", preset)
		}
		return caddy.ExitCodeSuccess, nil
	}
	ex, err := providers.NewExample(preset, event, fl.String("id"), time.Now())
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	sf, err := readSendFlags(fl, preset)
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	sf.id = ex.ID
	d := &delivery{flags: sf, event: ex.Event, body: ex.Body, headers: ex.Header}
	for name, values := range sf.headers {
		d.headers[name] = values
	}
	return deliver(sf, d)
}

// printExamplePresets lists the presets with examples and their event
// types.
func printExamplePresets(w io.Writer) {
	fmt.Fprintln(w, "presets with example payloads, and their event types:")
	for _, name := range providers.ExamplePresets() {
		fmt.Fprintf(w, "  %-8s %s\n", name, strings.Join(providers.ExampleEvents(name), " "))
	}
}

// triggerHelp is the long help of the trigger command.
var triggerHelp = `
Sends one of the example payloads a provider publishes for an event type
(Stripe's API fixtures, the GitHub examples Octokit ships, Paddle's SDK
test data: providers/examples/README.md names the source and licence of
each), signed as the provider signs it, to a route, and prints the answer
as send does.

Each trigger is a new delivery: a fresh delivery id where the preset keys
(Stripe's event id, X-GitHub-Delivery, Paddle's notification_id) and, for
Stripe and Paddle, the event's time made anew. --id sends the delivery of
that id instead, the rest of the payload as published, so a second
trigger with the same --id is the same delivery, as a provider's retry
is, and is replayed. ` + "`trigger list`" + ` lists the presets and their event
types, ` + "`trigger <preset> list`" + ` the event types of one.

  --url           the route's URL (required)
  --secret        the shared secret, as in the route's secret
  --header        an extra header, "Name: value" (repeatable)
  --id            the delivery id (default: a fresh one)
  --method        the method (default POST)
  --retry         send the delivery again and expect a replay
`

// newTriggerCommand is the trigger command.
func newTriggerCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "trigger <preset> <event type> --url <url> [--secret <secret>] [--id <id>]",
		Short: "Sends a provider's example payload of an event type, signed as the provider signs it",
		Long:  triggerHelp,
		Args:  cobra.MaximumNArgs(2),
		RunE:  commandFunc(cmdTrigger),
	}
	deliveryFlags(cmd)
	return cmd
}
