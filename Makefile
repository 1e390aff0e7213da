# Steward's build and test entry points. `make test` installs what it needs by itself:
# the Go toolchain comes from the machine; a stock etcdctl/etcdutl (and, for `make lint`,
# staticcheck) are built from the Go module proxy (versions pinned in hack/tools/go.mod) into
# ./bin, and, for `make test-rules`, Prometheus' promtool (hack/promtool/go.mod).

GO      ?= go
BIN     := $(CURDIR)/bin
TOOLPKG := go.etcd.io/etcd/etcdctl/v3 go.etcd.io/etcd/etcdutl/v3
# Kubernetes binaries, built from hack/kube (its own go.mod: Kubernetes pins a newer etcd than
# Steward embeds) into bin/k8s once and reused while there: for `make test`, the API server's
# (kube-apiserver, kubectl, etcd), helm and controller-gen (about 8 minutes cold on 2 cores);
# for `make e2e`, also a node's (kubelet, kube-proxy, the controller manager and scheduler).
K8S_VERSION := v1.37.2
K8S_BIN     := $(BIN)/k8s
K8S_LDFLAGS := -s -w $(foreach p,k8s.io/component-base/version k8s.io/client-go/pkg/version,-X $(p).gitVersion=$(K8S_VERSION) -X $(p).gitMajor=1 -X $(p).gitMinor=37)
# Packages of the test suite; the nested modules under hack/ are not part of ./...
PKGS    ?= ./...

.PHONY: all build tools kube-tools kube-node-tools lint vet staticcheck test test-long test-rules test-short fmt generate check-generated

all: build

build:
	$(GO) build -o $(BIN)/steward ./cmd/steward

tools:
	@mkdir -p $(BIN)
	cd hack/tools && GOBIN=$(BIN) $(GO) install $(TOOLPKG)

# promtool checks and unit-tests deploy/monitoring's alerting rules (test/monitoring). Its own
# module, so that Prometheus' dependencies do not move the etcd tools' versions; without the
# service discoveries (remove_all_sd), which the rules' tests do not use. Built once, reused
# while there.
$(BIN)/promtool: hack/promtool/go.mod
	@mkdir -p $(BIN)
	cd hack/promtool && GOBIN=$(BIN) $(GO) install -tags remove_all_sd github.com/prometheus/prometheus/cmd/promtool
	@touch $@

KUBE_TOOLS := $(K8S_BIN)/kube-apiserver $(K8S_BIN)/kubectl $(K8S_BIN)/etcd $(K8S_BIN)/helm $(BIN)/controller-gen
K8S_NODE   := kube-controller-manager kube-scheduler kubelet kube-proxy
KUBE_NODE_TOOLS := $(foreach b,$(K8S_NODE),$(K8S_BIN)/$(b))
kube-tools: $(KUBE_TOOLS)
kube-node-tools: $(KUBE_NODE_TOOLS)

$(KUBE_TOOLS) &: hack/kube/go.mod
	@mkdir -p $(K8S_BIN)
	@echo "building kube-apiserver, kubectl and etcd (Kubernetes $(K8S_VERSION)), helm and controller-gen into $(BIN) (about 8 minutes the first time)"
	cd hack/kube && CGO_ENABLED=0 $(GO) build -trimpath -tags=selinux,notest,grpcnotrace -ldflags "$(K8S_LDFLAGS)" -o $(K8S_BIN)/ \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl go.etcd.io/etcd/server/v3 helm.sh/helm/v3/cmd/helm
	mv $(K8S_BIN)/server $(K8S_BIN)/etcd
	cd hack/kube && CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen
	@touch $(KUBE_TOOLS)

$(KUBE_NODE_TOOLS) &: hack/kube/go.mod
	@mkdir -p $(K8S_BIN)
	@echo "building a Kubernetes $(K8S_VERSION) node's binaries into $(K8S_BIN)"
	cd hack/kube && CGO_ENABLED=0 $(GO) build -trimpath -tags=selinux,notest,grpcnotrace -ldflags "$(K8S_LDFLAGS)" -o $(K8S_BIN)/ \
		$(foreach b,$(K8S_NODE),k8s.io/kubernetes/cmd/$(b))
	@touch $(KUBE_NODE_TOOLS)

# Deepcopy functions, CRD YAML (api/v1alpha1) and the operator's ClusterRole (its rbac markers),
# copied with the other RBAC rules, the admission policies, the alerting rules and the
# dashboard into the Helm chart's files/.
# `make test` fails when the committed files differ from these.
CHART := deploy/helm/steward
generate: $(BIN)/controller-gen
	$(BIN)/controller-gen object paths=./api/...
	$(BIN)/controller-gen crd paths=./api/... output:crd:artifacts:config=deploy/crd
	$(BIN)/controller-gen rbac:roleName=steward-operator paths=./internal/operator/... output:rbac:artifacts:config=deploy/rbac
	@mkdir -p $(CHART)/crds $(CHART)/files
	cp deploy/crd/*.yaml $(CHART)/crds/
	cp deploy/rbac/role.yaml $(CHART)/files/operator-role.yaml
	cp deploy/rbac/metrics_auth_role.yaml deploy/rbac/metrics_reader_role.yaml deploy/policy/*.yaml $(CHART)/files/
	cp deploy/monitoring/prometheusrule.yaml deploy/monitoring/dashboard.json $(CHART)/files/

check-generated: generate
	@test -z "$$(git status --porcelain -- api deploy)" || { git status --short -- api deploy; echo "generated files differ from the committed ones: run make generate and commit"; exit 1; }

vet:
	$(GO) vet $(PKGS)

# staticcheck, built once and reused while there.
$(BIN)/staticcheck: hack/tools/go.mod
	@mkdir -p $(BIN)
	cd hack/tools && GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck
	@touch $@

staticcheck: $(BIN)/staticcheck
	$(BIN)/staticcheck $(PKGS)

# `make lint`: gofmt, go vet and staticcheck. Not part of `make test`: vet and staticcheck
# each type-check every dependency (Kubernetes' libraries among them) from scratch on a fresh
# machine, about 8 minutes together on 2 cores; CI runs it.
lint: fmt vet staticcheck

fmt:
	@test -z "$$(gofmt -l cmd internal test bench 2>/dev/null)" || { gofmt -l cmd internal test bench; echo "run gofmt -w on the files above"; exit 1; }

# `make test`: every package but the suites that run real clusters as processes for minutes
# (LONG_PKGS), which `make test-long` runs, and but the alerting rules' promtool test, which
# `make test-rules` runs (promtool takes over 2 minutes to build on 2 cores); CI runs all
# three. RACE=1 runs them under the race detector, as CI does (a build of its own, about 7
# minutes from a cold cache, and slower tests); `make test-long` always does. The test
# binaries are linked without DWARF (-w): stack traces keep their names and lines.
LONG_PKGS  := ./internal/local ./internal/kubeview ./test/cli
RULES_TEST := ^TestRulesWithPromtool$$
MODULE     := $(shell $(GO) list -m)
RACEFLAG    = $(if $(filter 1 true yes,$(RACE)),-race)
test: tools kube-tools fmt check-generated
	STEWARD_REQUIRE_TOOLS=1 $(GO) test $(RACEFLAG) -ldflags=-w -timeout 30m -skip '$(RULES_TEST)' \
		$$($(GO) list $(PKGS) | grep -v -x -F $(foreach p,$(LONG_PKGS),-e $(MODULE)/$(p:./%=%)))

test-long: tools kube-tools
	STEWARD_REQUIRE_TOOLS=1 $(GO) test -race -timeout 40m $(LONG_PKGS)

test-rules: $(BIN)/promtool
	STEWARD_REQUIRE_TOOLS=1 $(GO) test -count=1 -run '$(RULES_TEST)' ./test/monitoring/

# Unit tests only (no etcd processes): quick feedback while editing.
test-short:
	$(GO) test -short $(PKGS)

# Benchmarks, each side by side with its reference in the same run (bench/, see docs/benchmarks.md,
# which this rewrites). `make bench`: quick sizes (~10 min on 2 cores); `make bench FULL=1`: the
# sizes the issues ask for (1 GiB database, 1M revisions, longer phases); BENCH=snapshot,delta
# runs only those (snapshot, delta, replay, restore).
# Each benchmark is also compared with an earlier build of Steward: the benchmark programs and
# steward of BASELINE (a commit; default: the newest commit docs/benchmarks.md records, each
# section records the one it measured; BASELINE=none: no comparison), built in a temporary git
# worktree, run right before this tree's. A figure more than 10% worse than the baseline's is a
# regression: marked in the report, and the run fails unless ALLOW_REGRESSIONS=1.
.PHONY: bench
bench: build tools kube-tools
	$(GO) run ./bench/cmd/runner -steward $(BIN)/steward -etcdctl $(BIN)/etcdctl -etcdutl $(BIN)/etcdutl \
		-out docs/benchmarks.md $(if $(filter 1 true yes,$(FULL)),-full) $(if $(BENCH),-only $(BENCH)) \
		$(if $(BASELINE),-baseline $(BASELINE)) $(if $(filter 1 true yes,$(ALLOW_REGRESSIONS)),-allow-regressions) \
		-command "make bench$(if $(filter 1 true yes,$(FULL)), FULL=1)$(if $(BENCH), BENCH=$(BENCH))$(if $(BASELINE), BASELINE=$(BASELINE))"

# Fuzzing of every decoder of what a store or etcd returns: object names, objects (header,
# payload, trailer) and delta event streams (internal/backup); the gRPC snapshot stream, its
# SHA-256 trailer and watch responses (internal/backup/snapshotter). And of hostile input
# (issue 13): the sidecar API's requests, bodies and tokens, the identity file, cluster.json,
# the operator's ClusterConfig, store URLs (no credential in an error), and the CLI's
# durations, schedules and retention policies. Each target runs for FUZZTIME (hack/fuzz.sh builds
# each package's instrumented test binary once). Failing inputs are kept in the package's
# testdata/fuzz and replayed by every `go test` after.
FUZZTIME    ?= 10s
# package:target
FUZZTARGETS := \
	./internal/backup:FuzzParseKey \
	./internal/backup:FuzzObjectReader \
	./internal/backup:FuzzVouch \
	./internal/backup:FuzzRestorable \
	./internal/backup:FuzzEventReader \
	./internal/backup:FuzzDecodeEventInPlace \
	./internal/backup/snapshotter:FuzzSnapshotChunk \
	./internal/backup/snapshotter:FuzzSnapshotTrailer \
	./internal/backup/snapshotter:FuzzWatchResponse \
	./internal/backup:FuzzSnapshotCheck \
	./internal/seal:FuzzKeyringFile \
	./internal/seal:FuzzOpen \
	./internal/sidecarapi:FuzzDecodeBody \
	./internal/sidecarapi:FuzzParseTokens \
	./internal/sidecarapi:FuzzAuthenticate \
	./internal/member:FuzzSidecarAPI \
	./internal/datadir:FuzzReadIdentity \
	./internal/local:FuzzParseSpec \
	./internal/cli:FuzzClusterConfig \
	./internal/cli:FuzzCLIDurationsAndSchedules \
	./internal/store:FuzzOpenURLRedaction
.PHONY: fuzz
fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) hack/fuzz.sh $(FUZZTARGETS)

# Chaos suite (test/chaos): real local clusters under faults, histories checked for
# linearizability with porcupine, plus quorum loss and total loss. `make chaos` is the seeded,
# bounded CI set (~10 min on 2 cores); `make chaos SEED=7 DURATION=30m` runs longer,
# MEMBERS=5 uses 5-member clusters, FAULTS=swap,wipe limits the fault kinds (names in
# test/chaos/faults_test.go). A failed run keeps its cluster dirs and the porcupine
# visualisation under CHAOS_OUT.
SEED          ?= 1
DURATION      ?= 2m
MEMBERS       ?= 3
CHAOS_OUT     ?= $(or $(TMPDIR),/tmp)/steward-chaos
FAULTS        ?=
CHAOS_TIMEOUT ?= 60m
.PHONY: chaos
chaos:
	mkdir -p $(BIN); set -o pipefail; STEWARD_CHAOS=1 STEWARD_CHAOS_SEED=$(SEED) STEWARD_CHAOS_DURATION=$(DURATION) STEWARD_CHAOS_MEMBERS=$(MEMBERS) \
		STEWARD_CHAOS_FAULTS=$(FAULTS) STEWARD_CHAOS_OUT=$(CHAOS_OUT) $(GO) test -count=1 -v -timeout $(CHAOS_TIMEOUT) ./test/chaos 2>&1 | \
		tee $(BIN)/chaos.log || { awk -f hack/failures.awk $(BIN)/chaos.log; exit 1; }

# End to end on a real Kubernetes of E2E_NODES nodes built here (test/e2e, docs/kubernetes.md):
# each node's kubelet runs Steward's pods through its own containerd and runc. Needs root.
# `make e2e` runs the suite; `make e2e-up` starts the cluster for work by hand and prints the
# KUBECONFIG to use (`bin/e2e-node poweroff|poweron|partition|heal NODE` strike a node);
# `make e2e-down` stops it and undoes what it changed on the machine.
E2E_DIR   ?= /var/lib/steward-e2e
E2E_NODES ?= 3
.PHONY: e2e e2e-tools e2e-up e2e-down
e2e-tools: kube-tools kube-node-tools $(BIN)/coredns $(BIN)/pause
	@hack/e2e/packages.sh
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $(BIN)/e2e/steward ./cmd/steward
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $(BIN)/e2e/s3 ./test/e2e/cmd/s3
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $(BIN)/e2e/kubectl-steward ./cmd/kubectl-steward
	$(GO) build -o $(BIN)/e2e-node ./test/e2e/cmd/e2e-node

$(BIN)/coredns: hack/coredns/go.mod hack/coredns/main.go
	cd hack/coredns && CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $@ .

# The pod sandbox image's program, from the Kubernetes module's own source.
$(BIN)/pause: hack/kube/go.mod
	gcc -Os -static -DVERSION=v3.10.2 -o $@ "$$(cd hack/kube && $(GO) list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c"

# A failing run ends with what each failing test logged (hack/failures.awk).
e2e chaos: SHELL := /bin/bash
e2e: e2e-tools
	mkdir -p $(BIN); set -o pipefail; STEWARD_E2E=1 STEWARD_E2E_DIR=$(E2E_DIR) STEWARD_E2E_NODES=$(E2E_NODES) STEWARD_E2E_BIN=$(BIN) \
		$(GO) test -count=1 -v -parallel 2 -timeout 50m ./test/e2e/ 2>&1 | tee $(BIN)/e2e.log || { awk -f hack/failures.awk $(BIN)/e2e.log; exit 1; }

e2e-up: e2e-tools
	$(BIN)/e2e-node up --dir $(E2E_DIR) --bin $(BIN) --nodes $(E2E_NODES)

e2e-down:
	$(GO) build -o $(BIN)/e2e-node ./test/e2e/cmd/e2e-node
	$(BIN)/e2e-node down --dir $(E2E_DIR) --bin $(BIN)
