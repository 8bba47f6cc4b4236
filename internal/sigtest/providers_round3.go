package sigtest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"
)

// SNSMessage is an Amazon SNS message signed with key as AWS signs one,
// written by hand from "Verifying the signatures of Amazon SNS messages":
// `Key\nValue\n` for the fields to sign the message has, in byte order
// (Message, MessageId, Subject, SubscribeURL, Timestamp, Token, TopicArn,
// Type), RSA over SHA-1 for SignatureVersion 1 and SHA-256 for 2.
func SNSMessage(key *rsa.PrivateKey, version, certURL string, fields map[string]string) []byte {
	var msg strings.Builder
	for _, k := range []string{"Message", "MessageId", "Subject", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"} {
		if v, ok := fields[k]; ok {
			msg.WriteString(k + "\n" + v + "\n")
		}
	}
	h := crypto.SHA1
	var digest []byte
	if version == "2" {
		sum := sha256.Sum256([]byte(msg.String()))
		h, digest = crypto.SHA256, sum[:]
	} else {
		sum := sha1.Sum([]byte(msg.String()))
		digest = sum[:]
	}
	sig, err := rsa.SignPKCS1v15(nil, key, h, digest)
	if err != nil {
		panic(err)
	}
	out := map[string]string{"SignatureVersion": version, "SigningCertURL": certURL, "Signature": base64.StdEncoding.EncodeToString(sig)}
	for k, v := range fields {
		out[k] = v
	}
	b, err := json.Marshal(out)
	if err != nil {
		panic(err)
	}
	return b
}

// SNSNotification is the fields of an SNS notification of topic.
func SNSNotification(id, topic string) map[string]string {
	return map[string]string{
		"Type": "Notification", "MessageId": id, "TopicArn": topic, "Subject": "Order shipped",
		"Message": "{\"order\":\"o-1\"}\nline two", "Timestamp": "2026-12-06T07:36:32.000Z",
		"UnsubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=" + topic + ":9a2f",
	}
}

// SNSConfirmation is the fields of an SNS SubscriptionConfirmation (or,
// with typ, UnsubscribeConfirmation) of topic whose SubscribeURL is
// subscribeURL.
func SNSConfirmation(typ, topic, subscribeURL string) map[string]string {
	return map[string]string{
		"Type": typ, "MessageId": "c-" + subscribeURL, "TopicArn": topic, "Token": "2336412f37fb687f5d51e6e2425a",
		"Message": "You have chosen to subscribe to the topic " + topic, "SubscribeURL": subscribeURL,
		"Timestamp": "2026-12-06T07:36:32.000Z",
	}
}

// SelfSignedCert is a PEM certificate of key's public half named name,
// valid for an hour either side of now. SNS's and PayPal's certificates
// are trusted for where they come from (cert_url trust origin), so a test
// standing in for their hosts serves one that signs itself.
func SelfSignedCert(t testing.TB, key *rsa.PrivateKey, name string) string {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}
