package operator

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// metricsAuthTTL is how long a token's verdict is kept: a scrape every few seconds costs the
// API server two reviews a minute, not two a scrape.
const metricsAuthTTL = time.Minute

// metricsAuthEntries bounds the verdicts kept (one per distinct token seen within the TTL).
const metricsAuthEntries = 256

// metricsAuthFilter serves a request only when its bearer token is one the API server accepts
// (a TokenReview) and its user may get the request's URL (a SubjectAccessReview of a
// non-resource URL, as RBAC grants /metrics): 401 without a valid token, 403 without the right.
func metricsAuthFilter(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	c, err := client.New(cfg, client.Options{HTTPClient: httpClient})
	if err != nil {
		return nil, fmt.Errorf("metrics authorisation client: %w", err)
	}
	a := &metricsAuth{c: c, verdicts: map[[32]byte]metricsVerdict{}}
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || token == "" {
				http.Error(w, "a bearer token is required", http.StatusUnauthorized)
				return
			}
			status, err := a.verdict(r.Context(), token, r.Method, r.URL.Path)
			if err != nil {
				log.Error(err, "reviewing a metrics request")
				http.Error(w, "the request could not be reviewed", http.StatusInternalServerError)
				return
			}
			if status != http.StatusOK {
				http.Error(w, http.StatusText(status), status)
				return
			}
			next.ServeHTTP(w, r)
		}), nil
	}, nil
}

type metricsAuth struct {
	c        client.Client
	mu       sync.Mutex
	verdicts map[[32]byte]metricsVerdict
}

type metricsVerdict struct {
	status  int
	expires time.Time
}

// verdict is 200, 401 or 403 for the token asking for verb on path.
func (a *metricsAuth) verdict(ctx context.Context, token, method, path string) (int, error) {
	key := sha256.Sum256([]byte(method + " " + path + " " + token))
	now := time.Now()
	a.mu.Lock()
	v, ok := a.verdicts[key]
	a.mu.Unlock()
	if ok && now.Before(v.expires) {
		return v.status, nil
	}
	status, err := a.review(ctx, token, strings.ToLower(method), path)
	if err != nil {
		return 0, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.verdicts) >= metricsAuthEntries {
		for k, old := range a.verdicts {
			if !now.Before(old.expires) || len(a.verdicts) >= metricsAuthEntries {
				delete(a.verdicts, k)
			}
		}
	}
	a.verdicts[key] = metricsVerdict{status: status, expires: now.Add(metricsAuthTTL)}
	return status, nil
}

func (a *metricsAuth) review(ctx context.Context, token, verb, path string) (int, error) {
	tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}
	if err := a.c.Create(ctx, tr); err != nil {
		return 0, fmt.Errorf("TokenReview: %w", err)
	}
	if !tr.Status.Authenticated {
		return http.StatusUnauthorized, nil
	}
	u := tr.Status.User
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: verb},
	}}
	if err := a.c.Create(ctx, sar); err != nil {
		return 0, fmt.Errorf("SubjectAccessReview: %w", err)
	}
	if !sar.Status.Allowed {
		return http.StatusForbidden, nil
	}
	return http.StatusOK, nil
}
