package providers

import "errors"

// Google Cloud Pub/Sub push subscriptions with authentication: Pub/Sub
// sends `Authorization: Bearer <JWT>`, an OpenID Connect token signed by
// Google (RS256, Google's certificates), for the subscription's audience
// and service account. The token signs no body: it proves Pub/Sub sent
// the request for this audience as that service account, which Google
// tells receivers to check with the issuer, `email` and `email_verified`
// ("Authenticate push subscriptions"; Google's Go library, idtoken,
// checks neither the issuer nor the email).
func init() {
	register(&Preset{
		Name: "pubsub",
		Docs: []string{
			"https://cloud.google.com/pubsub/docs/authenticate-push-subscriptions",
			"https://cloud.google.com/pubsub/docs/push",
			"https://cloud.google.com/pubsub/quotas",
			"https://cloud.google.com/pubsub/docs/subscription-properties",
			"https://github.com/GoogleCloudPlatform/golang-samples/blob/a8677d3d5f5de41b7355d3a3278ec03458c96530/appengine/go11x/pubsub/authenicated_push/main.go",
		},
		Block: `jwt {
			header     Authorization scheme Bearer
			jwks_url   https://www.googleapis.com/oauth2/v3/certs
			issuer     accounts.google.com https://accounts.google.com
			algorithms RS256
			claim      email_verified true
		}`,
		// the message's id, assigned at publish, which every redelivery
		// carries; the push body writes it in both cases
		DefaultKey: []string{"json:message.messageId", "json:message.message_id", "body"},
		// redelivered until acknowledged or the subscription's message
		// retention ends: 7 days by default and at most
		TTL: 7 * day,
		// a message's data is up to 10 MB, base64 in the push body
		MaxBody:      16 << 20,
		BodyUnsigned: true,
		needs:        pubsubNeeds,
	})
}

// pubsubNeeds requires what makes a Google token Pub/Sub's for this route:
// the push endpoint's audience, and the subscription's service account
// (anyone can have Google sign a token for an audience of their choosing).
func pubsubNeeds(cfg VerifyConfig) error {
	if len(cfg.Audiences) == 0 || len(cfg.Claims["email"]) == 0 {
		return errors.New("the pubsub preset needs the push subscription's audience (audience <the push endpoint's URL, or the audience set on the subscription>) and its service account (claim email <name>@<project>.iam.gserviceaccount.com)")
	}
	return nil
}
