package restart

import (
	"cmp"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// TestRestartOnAFullDisk: Caddy, its data directory (and the file store in
// it) on a disk that is full when it restarts, starts and replays every
// delivery it answered before, whether the configuration it restarts with
// adds an archive or not. Before, with an archive it did not start at all
// (the archive's buckets could not be made: "no space left on device"),
// and every site was down: an archive that cannot write is degraded
// (counted, logged), never a reason to refuse the sites (docs/archive.md).
func TestRestartOnAFullDisk(t *testing.T) {
	for _, archive := range []string{"", "archive"} {
		t.Run(cmp.Or(archive, "plain"), func(t *testing.T) {
			const deliveries = 200
			up := newKeyedUpstream(t)
			data := t.TempDir()
			testkit.MountTmpfs(t, data, "size=16m")
			port := testkit.FreePort(t)
			url := testkit.SiteURL(port) + "/hook"
			site := func(archive string) string {
				return fmt.Sprintf(`:%d {
	webhook_idempotency {
		source full
		%s
	}
	reverse_proxy %s
}`, port, archive, up.Addr())
			}
			p := startCaddyProcess(t, data, site(""), testkit.SiteURL(port)+"/")
			key := func(i int) string { return fmt.Sprint("full-", i) }
			for i := range deliveries {
				resp, b := testkit.Post(t, url, []byte(`{"id":"`+key(i)+`"}`), "Idempotency-Key", key(i))
				testkit.WantNew(t, resp, b, http.StatusOK)
			}
			// the disk fills up under the running Caddy, and the store
			// takes what room its file had left: large answers, some of
			// them recorded, the rest not (their keys released)
			testkit.FillDisk(t, data)
			for i := range 40 {
				big := fmt.Sprint("big-", i)
				resp, b := testkit.Post(t, url, []byte(`{"id":"`+big+`"}`), "Idempotency-Key", big, "X-Answer-Size", "65536")
				if resp.StatusCode != http.StatusOK || len(b) != 65536 {
					t.Fatalf("%s on a full disk: %d, %d bytes", big, resp.StatusCode, len(b))
				}
			}
			p.stop()

			restarted := startCaddyProcess(t, data, site(archive), testkit.SiteURL(port)+"/")
			for i := range deliveries {
				resp, b := testkit.Post(t, url, []byte(`{"id":"`+key(i)+`"}`), "Idempotency-Key", key(i))
				if resp.Header.Get(testkit.ReplayedHeader) != "true" || up.calls(key(i)) != 1 {
					t.Fatalf("%s after the restart on a full disk: %d %s, replayed %q, the application called %d times",
						key(i), resp.StatusCode, b, resp.Header.Get(testkit.ReplayedHeader), up.calls(key(i)))
				}
			}
			// a new delivery still reaches the application, though nothing
			// can be recorded
			resp, b := testkit.Post(t, url, []byte(`{"id":"new"}`), "Idempotency-Key", "after-full")
			testkit.WantNew(t, resp, b, http.StatusOK)
			restarted.stop()
			if log := restarted.log.String(); archive != "" && !strings.Contains(log, "the archive cannot write") {
				t.Errorf("the archive that cannot write said nothing:\n%s", log)
			}
			t.Logf("%d deliveries replayed after the restart on a full disk", deliveries)
		})
	}
}
