package admin

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
	"github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

// The module's Caddy subcommands, `caddy webhook-idempotency <command>`
// (docs/operating.md#commands).

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "webhook-idempotency",
		Short: "Commands of the webhook_idempotency module",
		Long: `
Commands of the webhook_idempotency module:

  send      sign a delivery as a preset's provider does, send it to a
            route and show whether it was replayed (--retry: twice)
  trigger   send a provider's published example of an event type,
            signed as the provider signs it
  key       show a key's state through the admin API
  show      show a key's state and every attempt of its event, with the
            application's answers
  forget    forget a key, so that the provider's next retry is processed
  tail      print a source's newest archived events, and follow new ones
  pause     pause a source's inbox deliveries, or one destination's
  resume    resume them
  reconcile run a reconciliation pass of a source now (docs/reconcile.md)
  migrate   copy the live records of a file store into Redis, to move
            from one Caddy instance to several without reopening the
            deduplication window
`,
		CobraFunc: func(cmd *cobra.Command) {
			migrate := &cobra.Command{
				Use:   "migrate --to <redis url> [--from <file>] [--key-prefix <prefix>]",
				Short: "Copies the live records of a file store into Redis",
				Long: `
Copies every live record of a file store (completed keys, and the notes of
replay_guard flag) into Redis, each with the time it has left, so that a
Caddy switched to the redis store still replays the deliveries the file
store recorded. A key Redis holds already is left as it is.

Stop the Caddy that has the file open first (the file is read while no
other process writes it); providers retry what it does not answer
meanwhile, and the Caddy started on Redis answers their retries as
duplicates. The inbox's queue and the archive are not copied: let the
inbox deliver what it holds (its pending count at 0) before the switch.

--from        the store file (default: the file store's default path)
--to          a redis:// or rediss:// URL
--key-prefix  the redis store's key_prefix (default idem)
`,
				RunE: commandFunc(cmdMigrate),
			}
			migrate.Flags().String("from", "", "The file store's file")
			migrate.Flags().String("to", "", "The Redis URL")
			migrate.Flags().String("key-prefix", store.DefaultKeyPrefix, "The redis store's key_prefix")
			cmd.AddCommand(migrate, newSendCommand(), newTriggerCommand(), newReconcileCommand(), newShowCommand())
			cmd.AddCommand(newAdminCommands()...)
		},
	})
}

// cmdMigrate copies a file store's live records into Redis.
func cmdMigrate(fl caddycmd.Flags) (int, error) {
	from, to, prefix := fl.String("from"), fl.String("to"), fl.String("key-prefix")
	if from == "" {
		from = filestore.DefaultPath()
	}
	if to == "" {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("--to <redis url> is required")
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	rs := &redisstore.Store{URL: to, Prefix: prefix}
	if err := rs.Provision(ctx); err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	defer rs.Cleanup()
	copied, kept := 0, 0
	err := filestore.Export(from, func(v filestore.Value) error {
		key := v.Key
		if rest, ok := strings.CutPrefix(key, store.DefaultKeyPrefix+":"); ok {
			key = prefix + ":" + rest
		}
		value := v.Payload
		if v.Note {
			if rest, ok := strings.CutPrefix(string(value), store.DefaultKeyPrefix+":"); ok {
				value = []byte(prefix + ":" + rest)
			}
		}
		ttl := time.Until(v.Expires)
		if ttl <= 0 {
			return nil
		}
		wrote, err := rs.Import(context.Background(), key, value, ttl)
		if err != nil {
			return err
		}
		if wrote {
			copied++
		} else {
			kept++
		}
		return nil
	})
	if err != nil {
		// what was written stays in Redis: say how much, when anything was
		if copied+kept > 0 {
			return caddy.ExitCodeFailedStartup, fmt.Errorf("copied %d records from %s into Redis (and left %d that Redis held already) before failing: %v", copied, from, kept, err)
		}
		return caddy.ExitCodeFailedStartup, err
	}
	fmt.Printf("copied %d records from %s; %d keys Redis held already were left as they are\n", copied, from, kept)
	return caddy.ExitCodeSuccess, nil
}

// commandFunc runs a command for cobra. An error is one sentence on
// stderr (cobra's `Error: …` line, as for a wrong flag) and exit status 1,
// not a log line: caddycmd.WrapCommandFuncForCobra logs it through
// Caddy's logger, as JSON when stderr is not a terminal.
func commandFunc(f caddycmd.CommandFunc) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		_, err := f(caddycmd.Flags{FlagSet: cmd.Flags()})
		return err
	}
}
