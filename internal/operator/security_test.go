package operator

import (
	"strings"
	"testing"

	"github.com/etcd-steward/steward/api/v1alpha1"
)

func TestDecideDefaults(t *testing.T) {
	on, off := true, false
	cases := []struct {
		name     string
		in       defaultsInput
		wantCase DefaultsCase
		want     v1alpha1.ClusterDefaults
	}{
		{"new, spec silent: TLS, authentication and resource requests", defaultsInput{}, DefaultsNewCluster, v1alpha1.ClusterDefaults{TLS: true, Auth: true, Resources: true}},
		{"new, TLS spelled out", defaultsInput{SpecTLS: &on}, DefaultsNewCluster, v1alpha1.ClusterDefaults{TLS: true, Auth: true, Resources: true}},
		{"new, TLS opted out: no authentication without it", defaultsInput{SpecTLS: &off}, DefaultsNewCluster, v1alpha1.ClusterDefaults{TLS: true, Resources: true}},
		{"formed by an older operator, no StatefulSet left: as before, neither", defaultsInput{StatusWritten: true}, DefaultsExistingCluster, v1alpha1.ClusterDefaults{}},
		{"formed by an older operator, members plain", defaultsInput{StatusWritten: true, StatefulSet: true}, DefaultsExistingCluster, v1alpha1.ClusterDefaults{}},
		{"a StatefulSet without a status (left by a deleted namesake): what it runs",
			defaultsInput{StatefulSet: true, RunsTLS: true, RunsAuth: true}, DefaultsExistingCluster, v1alpha1.ClusterDefaults{TLS: true, Auth: true}},
		{"members with authentication and no TLS keep it", defaultsInput{StatusWritten: true, StatefulSet: true, RunsAuth: true},
			DefaultsExistingCluster, v1alpha1.ClusterDefaults{Auth: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, d := decideDefaults(tc.in)
			if c != tc.wantCase || d != tc.want {
				t.Fatalf("got %s %+v; want %s %+v", c, d, tc.wantCase, tc.want)
			}
		})
	}
}

func TestSecurityProblem(t *testing.T) {
	cluster := func(tls, auth *bool, defaults *v1alpha1.ClusterDefaults, rootPassword string) *v1alpha1.EtcdCluster {
		ec := &v1alpha1.EtcdCluster{}
		if tls != nil {
			ec.Spec.TLS = &v1alpha1.TLSSpec{Enabled: *tls}
		}
		if auth != nil {
			ec.Spec.Auth = &v1alpha1.AuthSpec{Enabled: *auth}
		}
		ec.Status.Defaults, ec.Status.RootPasswordSecret = defaults, rootPassword
		return ec
	}
	on := true
	plain, secure := &v1alpha1.ClusterDefaults{}, &v1alpha1.ClusterDefaults{TLS: true, Auth: true}
	cases := []struct {
		name    string
		ec      *v1alpha1.EtcdCluster
		refused bool
	}{
		{"defaults of a new cluster", cluster(nil, nil, secure, ""), false},
		{"authentication spelled out, TLS by default", cluster(nil, &on, secure, ""), false},
		{"an existing plain cluster", cluster(nil, nil, plain, ""), false},
		{"authentication turned on for an existing plain cluster", cluster(nil, &on, plain, ""), true},
		{"authentication without TLS already on (an older operator's) stays", cluster(nil, &on, plain, "old-root-password"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := securityProblem(tc.ec)
			if (err != nil) != tc.refused {
				t.Fatalf("securityProblem: %v; want refused %v", err, tc.refused)
			}
			if err != nil && !strings.Contains(err.Error(), "would cross the pod network in clear") {
				t.Fatalf("the refusal does not say why: %v", err)
			}
		})
	}
}
