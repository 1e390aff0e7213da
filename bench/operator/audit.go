package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// operatorUser is the user the operator runs as, apart from the benchmark's own clients, so
// that the API server's audit log tells its requests apart.
const operatorUser = "steward-operator"

// auditPolicy records each request of the operator's user once, as it is received, with its
// verb (get, list, watch, create, …) and resource; nobody else's.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [ResponseStarted, ResponseComplete, Panic]
rules:
- level: Metadata
  users: [` + operatorUser + `]
- level: None
`

// withAudit has the API server write the audit log of the operator's requests into dir.
func withAudit(dir string) (func(*envtest.Environment), string, error) {
	policy, log := filepath.Join(dir, "audit-policy.yaml"), filepath.Join(dir, "audit.log")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return nil, "", err
	}
	return func(env *envtest.Environment) {
		args := env.ControlPlane.GetAPIServer().Configure()
		args.Set("audit-policy-file", policy)
		args.Set("audit-log-path", log)
	}, log, nil
}

// requests counts the operator's requests received in [from, to) by verb, and by verb and
// resource ("get secrets"). A GET of an object is verb get; a LIST and the opening of a
// WATCH, though HTTP GETs too (client-go's rest_client_requests_total counts them as GET),
// are verbs list and watch.
type requests struct {
	byVerb     map[string]int
	byResource map[string]int
}

func readAudit(path string, from, to time.Time) (requests, error) {
	r := requests{byVerb: map[string]int{}, byResource: map[string]int{}}
	f, err := os.Open(path)
	if err != nil {
		return r, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e struct {
			Verb      string    `json:"verb"`
			Received  time.Time `json:"requestReceivedTimestamp"`
			ObjectRef *struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
			} `json:"objectRef"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return r, fmt.Errorf("%s: %w", path, err)
		}
		if e.Received.Before(from) || !e.Received.Before(to) {
			continue
		}
		what := "(no object)"
		if o := e.ObjectRef; o != nil {
			what = strings.TrimSuffix(o.Resource+"/"+o.Subresource, "/")
		}
		r.byVerb[e.Verb]++
		r.byResource[e.Verb+" "+what]++
	}
	return r, sc.Err()
}

// String lists the requests by verb and resource, most first.
func (r requests) String() string {
	keys := sets.List(sets.KeySet(r.byResource))
	slices.SortStableFunc(keys, func(a, b string) int { return r.byResource[b] - r.byResource[a] })
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, r.byResource[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
