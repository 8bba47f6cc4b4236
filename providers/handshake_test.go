package providers

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// deliveriesThatAreNotHandshakes are 2 KB events of the presets with a
// handshake, each with the request it comes in.
func deliveriesThatAreNotHandshakes() map[string]struct {
	hs   *Handshake
	r    *http.Request
	body []byte
} {
	pad := strings.Repeat("x", 2000)
	request := func(header ...string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/hook", nil)
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		return r
	}
	type delivery = struct {
		hs   *Handshake
		r    *http.Request
		body []byte
	}
	return map[string]delivery{
		"slack":   {&slackURLVerification, request(), []byte(`{"type":"event_callback","event_id":"Ev1","event":{"text":"` + pad + `"}}`)},
		"zoom":    {&zoomURLValidation, request(), []byte(`{"event":"meeting.started","payload":{"object":{"topic":"` + pad + `"}}}`)},
		"discord": {&discordPing, request(), []byte(`{"id":"1107","type":2,"data":{"name":"` + pad + `"}}`)},
		// a webhook event has the type of an interaction PING
		"discord event":  {&discordPing, request(), []byte(`{"version":1,"application_id":"11","type":1,"event":{"type":"LOBBY_MESSAGE_CREATE","data":{"content":"` + pad + `"}}}`)},
		"twitch":         {&twitchCallbackVerification, request("Twitch-Eventsub-Message-Type", "notification"), []byte(`{"event":{"user_name":"` + pad + `"}}`)},
		"whatsapp":       {&metaSubscription, httptest.NewRequest(http.MethodGet, "/hook?health=1", nil), nil},
		"dropbox, nylas": {&challengeEcho, httptest.NewRequest(http.MethodGet, "/hook?health=1&chal=x", nil), nil},
	}
}

// Looking for a handshake in an ordinary delivery costs no allocation.
func TestHandshakeDetectionDoesNotAllocate(t *testing.T) {
	for name, d := range deliveriesThatAreNotHandshakes() {
		state := &HandshakeState{Handshake: d.hs}
		if _, ok := d.hs.answer(state, d.r, d.body); ok {
			t.Fatalf("%s: an event taken for a handshake", name)
		}
		if n := testing.AllocsPerRun(100, func() { d.hs.answer(state, d.r, d.body) }); n != 0 {
			t.Errorf("%s: %v allocations", name, n)
		}
	}
}

// BenchmarkHandshakeDetection measures what looking for a handshake costs
// an ordinary 2 KB delivery.
func BenchmarkHandshakeDetection(b *testing.B) {
	for name, d := range deliveriesThatAreNotHandshakes() {
		b.Run(name, func(b *testing.B) {
			state := &HandshakeState{Handshake: d.hs}
			b.ReportAllocs()
			for b.Loop() {
				d.hs.answer(state, d.r, d.body)
			}
		})
	}
}
