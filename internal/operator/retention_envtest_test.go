package operator

import (
	"context"
	"fmt"
	"testing"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/backup/retention"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestRetentionAgreesWithTheParser: the API server accepts exactly the spec.backup.retention
// values the sidecars' parser (retention.ParsePolicy, which the CLI uses too) accepts.
func TestRetentionAgreesWithTheParser(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	for i, in := range []string{
		"exponential", "keep", "limit:1", "limit:999999", "age:1h", "age:30d", "age:4w", "age:9999w",
		"", " keep", "keep ", "Keep", "keep:1", "exponential:2", "limit", "limit:", "limit:0", "limit:03", "limit:+3", "limit:-1",
		"limit=3", "limit:1000000", "limit:99999999999999999999", "age", "age:", "age:30", "age:0d", "age:030d", "age:30m",
		"age:30s", "age:1.5d", "age:30D", "age:10000w", "age:30d ", "forever",
	} {
		ec := newCluster(ns, fmt.Sprintf("r%d", i), 3)
		ec.Spec.Backup = &v1alpha1.BackupSpec{Store: "s3://b/p", Retention: in}
		apiErr := k8s.Create(context.Background(), ec, client.DryRunAll)
		_, parseErr := retention.ParsePolicy(in)
		if in == "" {
			// Left out, the API server defaults it to exponential: nothing to parse.
			parseErr = nil
		}
		if (apiErr == nil) != (parseErr == nil) {
			t.Errorf("retention %q: the API server says %v, the parser %v", in, apiErr, parseErr)
		}
	}
}
