package providers

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sync"
	"time"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/keyset"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Amazon SNS's HTTP/S notifications: `Signature`, RSA with SHA-1
// (`SignatureVersion` 1) or SHA-256 (2), over `Key\nValue\n` for the
// message's fields in byte order, present ones only, with the key of the
// certificate at `SigningCertURL`, which is fetched only from an SNS host
// (Amazon SNS Developer Guide, "Verifying the signatures of Amazon SNS
// messages"; aws-php-sns-message-validator, getStringToSign). SNS serves
// that certificate alone, without its issuer: it is trusted for having
// come over https from an SNS host, its dates and name checked, as AWS's
// own validators trust it (AWS SDK for Java v2, SnsMessageManager).
//
// A SubscriptionConfirmation is confirmed at the edge, once verified, by a
// GET of its SubscribeURL (an SNS host's, over https, never another);
// an UnsubscribeConfirmation is passed on, its URL never visited (it
// would subscribe the endpoint again).
func init() {
	register(&Preset{
		Name: "sns",
		Docs: []string{
			"https://docs.aws.amazon.com/sns/latest/dg/sns-verify-signature-of-message.html",
			"https://docs.aws.amazon.com/sns/latest/dg/SendMessageToHttp.prepare.html",
			"https://docs.aws.amazon.com/sns/latest/dg/sns-message-and-json-formats.html",
			"https://docs.aws.amazon.com/sns/latest/dg/sns-message-delivery-retries.html",
			"https://docs.aws.amazon.com/sns/latest/dg/sns-large-payload-raw-message-delivery.html",
			"https://github.com/aws/aws-php-sns-message-validator/blob/01f104920423c9b7c0a13dbe5115cc4cbc808161/src/MessageValidator.php",
			"https://github.com/aws/aws-sdk-java-v2/tree/master/services-custom/sns-message-manager",
		},
		Block: `template {
			string    "Message\n{json.Message}\nMessageId\n{json.MessageId}\n[Subject\n{json.Subject}\n][SubscribeURL\n{json.SubscribeURL}\n]Timestamp\n{json.Timestamp}\n[Token\n{json.Token}\n]TopicArn\n{json.TopicArn}\nType\n{json.Type}\n"
			algorithm json:SignatureVersion {
				1 rsa-sha1
				2 rsa-sha256
			}
			signature json:Signature encoding base64
			cert_url  json:SigningCertURL {
				hosts    ` + snsHost + `
				paths    /[^/]+\.pem
				subjects sns\.amazonaws\.com(\.cn)? sns-[a-z0-9-]+\.amazonaws\.com(\.cn)? (sns|sns-signing)\.[a-z0-9-]+\.amazonaws\.com(\.cn)?
				trust    origin
			}
		}`,
		// "For a notification that Amazon SNS resends during a retry, the
		// message ID of the original message is used" (message formats)
		DefaultKey: []string{"json:MessageId", "body"},
		// SNS counts any answer from 200 to 499 as final: a 409 for a
		// retry that comes while the first attempt is processed would
		// lose the message if that attempt then failed
		InFlight: "wait",
		// the confirmation's credentials, and the URL with which anyone
		// unsubscribes the endpoint (in every notification)
		Redact:    []string{"json:SubscribeURL", "json:Token", "json:UnsubscribeURL"},
		Handshake: &snsSubscriptionConfirmation,
		needs:     snsNeedsTopics,
		refuse:    snsRefuseRaw,
	})
}

// snsHost is the pattern of Amazon SNS's hosts, from which certificates
// are fetched and subscriptions confirmed ("not just something from the
// amazonaws domain, which could include S3 buckets":
// aws-php-sns-message-validator, MessageValidator).
const snsHost = `sns\.[a-zA-Z0-9-]{3,}\.amazonaws\.com(\.cn)?`

var snsHostRE = regexp.MustCompile(`^(?:` + snsHost + `)$`)

// snsNeedsTopics requires the topics a route takes: SNS signs every
// topic's messages alike, and anyone may subscribe an endpoint to a
// topic of their own ("Reject any message with an unexpected TopicArn",
// Verifying the signatures).
func snsNeedsTopics(cfg VerifyConfig) error {
	if len(cfg.Claims["TopicArn"]) == 0 {
		return errors.New("the sns preset needs the topics it takes: claim TopicArn arn:aws:sns:<region>:<account>:<topic>... (SNS signs every topic's messages, whoever owns the topic)")
	}
	return nil
}

// errRawDelivery refuses a message SNS delivered raw: without its
// envelope, it carries no signature.
var errRawDelivery = &signature.Error{Reason: "raw message delivery carries no signature: turn RawMessageDelivery off for this subscription"}

func snsRefuseRaw(r *http.Request, _ []byte) error {
	if r.Header.Get("X-Amz-Sns-Rawdelivery") == "true" {
		return errRawDelivery
	}
	return nil
}

// snsSubscriptionConfirmation confirms a verified SubscriptionConfirmation
// with a GET of its SubscribeURL ("Confirm the subscription": visit the
// SubscribeURL), made in the background once the delivery is answered.
var snsSubscriptionConfirmation = Handshake{signed: true, answer: answerSNSConfirmation}

// The confirmations are logged with the route's logger, each with its
// topic and whether the subscription was confirmed (`confirmed`), never
// the SubscribeURL nor the token it holds: at INFO once confirmed; at
// WARN when it was not, which leaves the topic's messages undelivered
// until someone confirms it.
func answerSNSConfirmation(hs *HandshakeState, r *http.Request, body []byte) (HandshakeAnswer, bool) {
	u, ok := eventString(body, "ubscriptionConfirmation", "Type", "SubscriptionConfirmation", "SubscribeURL")
	if !ok {
		return HandshakeAnswer{}, false
	}
	log := hs.logger.With(zap.String("provider", "sns"), zap.String("topic_arn", gjson.GetBytes(body, "TopicArn").Str))
	if !snsConfirmURL(u) {
		// passed on: the application may confirm it (or not) itself
		log.Warn("SNS subscription confirmation passed on: its SubscribeURL is not an SNS ConfirmSubscription URL over https, and is never visited",
			zap.Bool("confirmed", false))
		return HandshakeAnswer{}, false
	}
	if !snsConfirmations.start(r.Context(), u, log) {
		return HandshakeAnswer{}, false
	}
	return HandshakeAnswer{Status: http.StatusOK}, true
}

// snsConfirmURL reports whether u is an SNS ConfirmSubscription URL over
// https on an SNS host.
func snsConfirmURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.User != nil || u.Opaque != "" || (u.Port() != "" && u.Port() != "443") {
		return false
	}
	return snsHostRE.MatchString(u.Hostname()) && u.Query().Get("Action") == "ConfirmSubscription"
}

// Bounds of the confirmations.
const (
	snsConfirmTimeout  = 10 * time.Second // one GET
	snsConfirmsAtOnce  = 4                // GETs at once; more confirmations are passed on
	snsConfirmedWithin = 10 * time.Minute // a URL confirmed within is not visited again
	snsConfirmedKept   = 256              // URLs remembered
)

// snsConfirmer makes the confirmations' GETs, a few at a time, each URL
// once in a while (a captured confirmation sent again is answered
// without another GET).
type snsConfirmer struct {
	mu      sync.Mutex
	running int
	seen    map[string]time.Time // URLs confirmed or being confirmed
}

var snsConfirmations = &snsConfirmer{seen: map[string]time.Time{}}

// start confirms u in the background once answered is done (the delivery
// has been answered); it reports false when it cannot (too many at once).
func (c *snsConfirmer) start(answered context.Context, u string, log *zap.Logger) bool {
	c.mu.Lock()
	now := time.Now()
	if at, ok := c.seen[u]; ok && now.Sub(at) < snsConfirmedWithin {
		c.mu.Unlock()
		return true
	}
	if c.running >= snsConfirmsAtOnce {
		c.mu.Unlock()
		log.Warn("SNS subscription confirmation passed on: too many confirmations at once", zap.Bool("confirmed", false))
		return false
	}
	if len(c.seen) >= snsConfirmedKept {
		for k, at := range c.seen {
			if now.Sub(at) >= snsConfirmedWithin {
				delete(c.seen, k)
			}
		}
		for k := range c.seen {
			if len(c.seen) < snsConfirmedKept {
				break
			}
			delete(c.seen, k)
		}
	}
	c.running++
	c.seen[u] = now
	c.mu.Unlock()
	go func() {
		<-answered.Done()
		err := snsConfirm(u)
		c.mu.Lock()
		c.running--
		if err != nil {
			delete(c.seen, u) // SNS's next confirmation is visited
		}
		c.mu.Unlock()
		if err != nil {
			log.Warn("confirming the SNS subscription failed; confirm it in the SNS console, or answer SNS's next confirmation",
				zap.Bool("confirmed", false), zap.Error(err))
			return
		}
		log.Info("SNS subscription confirmed", zap.Bool("confirmed", true))
	}()
	return true
}

// snsConfirm makes the GET of a SubscribeURL, without following any
// redirect.
func snsConfirm(u string) error {
	ctx, cancel := context.WithTimeout(context.Background(), snsConfirmTimeout)
	defer cancel()
	client := http.Client{}
	if keyset.Client != nil {
		client = *keyset.Client
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		// the URL holds the subscription's token: not in the log
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return errors.New("SNS answered " + resp.Status)
	}
	return nil
}
