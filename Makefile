# Steward's build and test entry points. `make test` installs what it needs by itself:
# the Go toolchain comes from the machine; staticcheck and a stock etcdctl/etcdutl are built
# from the Go module proxy (versions pinned in hack/tools/go.mod) into ./bin.

GO      ?= go
BIN     := $(CURDIR)/bin
TOOLPKG := go.etcd.io/etcd/etcdctl/v3 go.etcd.io/etcd/etcdutl/v3 honnef.co/go/tools/cmd/staticcheck
# Packages of the test suite; the nested module hack/tools is not part of ./...
PKGS    ?= ./...

.PHONY: all build tools vet staticcheck test test-short fmt

all: build

build:
	$(GO) build -o $(BIN)/steward ./cmd/steward

tools:
	@mkdir -p $(BIN)
	cd hack/tools && GOBIN=$(BIN) $(GO) install $(TOOLPKG)

vet:
	$(GO) vet $(PKGS)

staticcheck: tools
	$(BIN)/staticcheck $(PKGS)

fmt:
	@test -z "$$(gofmt -l cmd internal test bench 2>/dev/null)" || { gofmt -l cmd internal test bench; echo "run gofmt -w on the files above"; exit 1; }

test: tools fmt vet staticcheck
	STEWARD_REQUIRE_TOOLS=1 $(GO) test -race -timeout 45m $(PKGS)

# Unit tests only (no etcd processes): quick feedback while editing.
test-short:
	$(GO) test -short $(PKGS)

# Benchmarks, each side by side with its reference in the same run (bench/, see docs/benchmarks.md,
# which this rewrites). `make bench`: quick sizes (~10 min on 2 cores); `make bench FULL=1`: the
# sizes the issues ask for (1 GiB database, 1M revisions, longer phases); BENCH=snapshot,delta
# runs only those (snapshot, delta, replay, restore).
.PHONY: bench
bench: build tools
	$(GO) run ./bench/cmd/runner -steward $(BIN)/steward -etcdctl $(BIN)/etcdctl -etcdutl $(BIN)/etcdutl \
		-out docs/benchmarks.md $(if $(filter 1 true yes,$(FULL)),-full) $(if $(BENCH),-only $(BENCH)) \
		-command "make bench$(if $(filter 1 true yes,$(FULL)), FULL=1)$(if $(BENCH), BENCH=$(BENCH))"

# Fuzzing of every decoder of what a store returns (object names, objects, delta event
# streams): each target for FUZZTIME. Failing inputs are kept in the package's testdata/fuzz
# and replayed by every `go test` after.
FUZZTIME    ?= 20s
FUZZTARGETS := FuzzParseKey FuzzObjectReader FuzzEventReader
.PHONY: fuzz
fuzz:
	@for t in $(FUZZTARGETS); do \
		echo "fuzz $$t for $(FUZZTIME)"; \
		$(GO) test ./internal/backup -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 10s || exit 1; \
	done

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
	STEWARD_CHAOS=1 STEWARD_CHAOS_SEED=$(SEED) STEWARD_CHAOS_DURATION=$(DURATION) STEWARD_CHAOS_MEMBERS=$(MEMBERS) \
		STEWARD_CHAOS_FAULTS=$(FAULTS) STEWARD_CHAOS_OUT=$(CHAOS_OUT) $(GO) test -count=1 -v -timeout $(CHAOS_TIMEOUT) ./test/chaos
