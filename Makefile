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
