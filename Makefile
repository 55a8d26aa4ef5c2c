# empo2 — build, test and benchmark. Two commands set up a fresh machine:
#   make        builds bin/empo2 (CPU)
#   make test   runs the test suite
# llama.cpp and ggml come only from the pinned Go module github.com/ollama/ollama
# (see third_party/README.md); nothing third-party is committed here.

GO        ?= go
SHELL     := bash
BIN       := bin/empo2
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

# cgo compiles ggml's CPU kernels with no -march flag by default (SSE2 only,
# ~20x slower matmuls). Override MARCH for a portable build: make MARCH=-march=x86-64-v2
MARCH     ?= -march=native
export CGO_ENABLED  := 1
export CGO_CFLAGS   ?= -O3 $(MARCH)
export CGO_CXXFLAGS ?= -O3 $(MARCH)
# A stray ggml.h in $TMPDIR can hijack cgo's includes: build in a clean one.
export TMPDIR       := $(CURDIR)/.tmp

TEST_TIMEOUT ?= 20m
GOTEST_FLAGS ?=

.PHONY: all build deps test test-race bench cuda clean fmt vet

all: build

# third_party/ollama -> the module directory, so cgo code here can include
# llama.h / ggml.h / gguf.h with paths relative to ${SRCDIR}.
deps: third_party/ollama
third_party/ollama: go.mod go.sum
	@mkdir -p $(TMPDIR)
	$(GO) mod download github.com/ollama/ollama
	ln -sfn "$$($(GO) list -m -f '{{.Dir}}' github.com/ollama/ollama)" $@
	@touch -h $@

build: deps
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/empo2

# The concurrency tests (TestConcurrent*) under the race detector (the first
# -race build compiles llama.cpp once more, ~3 min), then the whole suite.
test: build
	$(GO) vet ./...
	$(MAKE) --no-print-directory test-race
	$(GO) test -timeout $(TEST_TIMEOUT) $(GOTEST_FLAGS) ./...

test-race: deps
	$(GO) test -race -timeout $(TEST_TIMEOUT) -run 'Concurren' ./...

bench: build
	set -o pipefail; $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./... 2>&1 | tee bench.txt

# ggml's CUDA backend, built by CMake from the pinned module's own source as a
# loadable backend library (bin/libggml-cuda.so). Needs nvcc + CMake; it cannot
# run on the CPU-only machines this project is developed on.
cuda: deps
	cmake -S . -B build/cuda -DCMAKE_BUILD_TYPE=Release \
		-DOLLAMA_DIR="$$(readlink -f third_party/ollama)"
	cmake --build build/cuda --target ggml-cuda -j
	@mkdir -p bin && cp build/cuda/libggml-*.so* bin/

fmt:
	gofmt -w $$(git ls-files '*.go')

vet: deps
	$(GO) vet ./...

clean:
	rm -rf bin build .tmp third_party/ollama bench.txt
