package testutil

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// KubeBin is where `make kube-tools` builds kube-apiserver, kubectl, etcd and helm.
func KubeBin() string { return filepath.Join(RepoRoot(), "bin", "k8s") }

// ErrNoKubeTools says the Kubernetes test binaries are missing.
var ErrNoKubeTools = errors.New(KubeBin() + "/kube-apiserver is missing; run `make kube-tools` (make test builds it)")

// APIServer is a real kube-apiserver (and its etcd) with Steward's CRDs installed.
type APIServer struct {
	Env    *envtest.Environment
	Config *rest.Config
	// Kubeconfig is a file with admin credentials, for kubectl and for processes.
	Kubeconfig string
}

// StartAPIServer starts the API server built into bin/k8s, or returns ErrNoKubeTools.
// Each configure changes the environment before it starts (a benchmark's audit log).
func StartAPIServer(configure ...func(*envtest.Environment)) (*APIServer, error) {
	if _, err := os.Stat(filepath.Join(KubeBin(), "kube-apiserver")); err != nil {
		return nil, ErrNoKubeTools
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: KubeBin(),
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "deploy", "crd")},
		ErrorIfCRDPathMissing: true,
	}
	for _, c := range configure {
		c(env)
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver: %w", err)
	}
	s := &APIServer{Env: env, Config: cfg}
	user, err := env.ControlPlane.AddUser(envtest.User{Name: "test-admin", Groups: []string{"system:masters"}}, nil)
	if err == nil {
		var b []byte
		if b, err = user.KubeConfig(); err == nil {
			s.Kubeconfig = filepath.Join(os.TempDir(), fmt.Sprintf("steward-envtest-%d.kubeconfig", os.Getpid()))
			err = os.WriteFile(s.Kubeconfig, b, 0o600)
		}
	}
	if err != nil {
		s.Stop()
		return nil, fmt.Errorf("admin kubeconfig: %w", err)
	}
	return s, nil
}

// Stop stops the API server and removes the kubeconfig.
func (s *APIServer) Stop() {
	_ = s.Env.Stop()
	if s.Kubeconfig != "" {
		_ = os.Remove(s.Kubeconfig)
	}
}
