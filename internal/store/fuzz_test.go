package store

import (
	"context"
	"strconv"
	"strings"
	"testing"
)

// FuzzOpenURLRedaction: a store URL may carry credentials (user info, or query parameters
// such as an Azure SAS signature). Whatever the URL (parseable or not, known scheme or not),
// an error from Open never holds the password or a secret parameter's value. Only URLs that
// fail before any I/O are opened: unknown schemes and unparseable ones.
func FuzzOpenURLRedaction(f *testing.F) {
	f.Add("s3", "user", "hunter2-secret", "bucket", "/prefix?region=x")
	f.Add("s3", "u", "se@cret-pass", "bucket%zz", "")
	f.Add("ftp", "u", "p4ssw0rd-long", "host", "/x")
	f.Add("azblob", "", "", "container", "?sig=SIGNATURE-VALUE&sv=1")
	f.Add("bad scheme", "u", "p4ss word", "h", "")
	f.Fuzz(func(t *testing.T, scheme, user, pass, host, rest string) {
		raw := scheme + "://"
		if user != "" || pass != "" {
			raw += user + ":" + pass + "@"
		}
		raw += host + rest
		if known(scheme) && !unparseable(raw) {
			return // would do I/O
		}
		_, err := Open(context.Background(), raw, Options{})
		if err == nil {
			t.Fatalf("Open(%q) succeeded", raw)
		}
		msg := err.Error()
		// A secret is checked when it is long enough not to appear by chance in the rest, as
		// it is or as the error may quote a stretch of it (a byte 0xa0 quoted is `\xa0`, whose
		// "0" may continue a run of zeros; after a byte 0xd2 it is no escape but a letter, so
		// what a stretch quotes to depends on where it starts).
		inPublic := func(secret string, parts ...string) bool {
			public := strings.Join(parts, "")
			if strings.Contains(public, secret) {
				return true
			}
			for i := range len(public) {
				for j := i + 1; j <= len(public) && j-i <= 64; j++ {
					if strings.Contains(strconv.Quote(public[i:j]), secret) {
						return true
					}
				}
			}
			return false
		}
		if len(pass) >= 6 && !inPublic(pass, scheme, user, host, rest, schemeList()) && strings.Contains(msg, pass) {
			t.Fatalf("Open(%q) error holds the password: %s", raw, msg)
		}
		path, query, _ := strings.Cut(rest, "?")
		for _, kv := range strings.Split(query, "&") {
			k, v, ok := strings.Cut(kv, "=")
			if ok && secretParam.MatchString(k) && len(v) >= 6 && !inPublic(v, scheme, user, host, path, k, schemeList()) && strings.Contains(msg, v) {
				t.Fatalf("Open(%q) error holds the value of %s: %s", raw, k, msg)
			}
		}
	})
}

func known(scheme string) bool {
	for _, s := range Schemes {
		if strings.EqualFold(s, scheme) { // url.Parse lowers the scheme
			return true
		}
	}
	return false
}

func unparseable(raw string) bool {
	_, err := parseURL(raw)
	return err != nil
}
