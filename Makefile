# empo2 — build, test and benchmark. Two commands set up a fresh machine:
#   make        builds bin/empo2 (CPU)
#   make test   runs the test suite
#   make demo   builds, then runs the main job end to end (empo2 quickstart)
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

# Intel AMX (Sapphire Rapids and later): when the flags enable AMX-INT8, ggml's
# ggml-cpu.cpp references ggml_backend_amx_buffer_type(), but the pinned
# module's cgo package does not compile ggml-cpu/amx/*.cpp, so the link fails.
# The AMX path is switched off then (AVX-512/VNNI kernels stay). On a CPU
# without AMX nothing is appended, so the flags (and Go's build cache key)
# stay exactly "-O3 -march=native". `make NO_AMX=` disables the fix.
NO_AMX    ?= -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
CGO_CC    := $(or $(shell $(GO) env CC 2>/dev/null),gcc)
amx_on     = $(shell $(CGO_CC) $(1) -dM -E -x c - </dev/null 2>/dev/null | grep -q __AMX_INT8__ && echo yes)
ifneq ($(strip $(NO_AMX)),)
ifeq ($(call amx_on,$(CGO_CFLAGS)),yes)
CGO_CFLAGS   += $(NO_AMX)
endif
ifeq ($(call amx_on,$(CGO_CXXFLAGS)),yes)
CGO_CXXFLAGS += $(NO_AMX)
endif
endif
# A stray ggml.h in $TMPDIR can hijack cgo's includes: build in a clean one.
export TMPDIR       := $(CURDIR)/.tmp

TEST_TIMEOUT ?= 20m
GOTEST_FLAGS ?=

.PHONY: all build deps test test-race bench cuda cuda-test link-check clean fmt vet

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

# Links (does not run) bin/empo2 and the training graph's test binary for other
# x86-64 CPUs than this one, with the same AMX rule as above, so a build that
# fails on another machine (the AMX link error) fails here too. Each -march
# compiles llama.cpp once more (minutes on 2 cores; cached afterwards). A -march
# the compiler does not know is reported and skipped, not a linker error.
LINK_CHECK ?= sapphirerapids znver4 x86-64-v2
link-check: deps
	@set -e; for m in $(LINK_CHECK); do \
	  if ! $(CGO_CC) -march=$$m -E -x c - </dev/null >/dev/null 2>&1; then \
	    echo "link-check: SKIPPED -march=$$m: $(CGO_CC) $$($(CGO_CC) -dumpfullversion) does not know this CPU name (a newer compiler does, e.g. GCC >= 13 for znver4); nothing was linked for it" >&2; \
	    continue; \
	  fi; \
	  f="-O3 -march=$$m"; \
	  if [ -n "$(strip $(NO_AMX))" ] && $(CGO_CC) $$f -dM -E -x c - </dev/null | grep -q __AMX_INT8__; then f="$$f $(NO_AMX)"; fi; \
	  echo "link-check: -march=$$m: CGO_CFLAGS=CGO_CXXFLAGS=\"$$f\""; t0=$$(date +%s); \
	  if ! CGO_CFLAGS="$$f" CGO_CXXFLAGS="$$f" $(GO) build -o /dev/null ./cmd/empo2 || \
	     ! CGO_CFLAGS="$$f" CGO_CXXFLAGS="$$f" $(GO) test -c -o /dev/null ./cgo; then \
	    echo "link-check: FAILED: bin/empo2 or the cgo test binary does not link for -march=$$m" >&2; exit 1; \
	  fi; \
	  echo "link-check: -march=$$m links ($$(( $$(date +%s) - t0 )) s)"; \
	done

bench: build
	set -o pipefail; $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./... 2>&1 | tee bench.txt

# empo2's rollout loop against llama.cpp's own sampler loop and the
# decode-only roof, Qwen's 152k vocabulary on the 0.5B shape (2 layers;
# EMPO2_BENCH_LAYERS overrides), batch 1/8/64: one line per batch with
# `ratio` (goal >= 0.95) and `roof_ratio`; llama/bench_rollout_test.go.
# Also part of `make bench`.
.PHONY: bench-rollout
bench-rollout: deps
	set -o pipefail; $(GO) test -run '^$$' -bench 'BenchmarkRollout' -benchtime 1x -timeout 30m ./llama 2>&1 | tee bench-rollout.txt

# The live report's browser test (report: TestLivePageInChromium, docs/report.md)
# loads the page in headless Chromium: Debian's chromium package, installed
# where no Chromium is on PATH (.ci/run runs this before make test).
.PHONY: chromium
chromium:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || command -v google-chrome >/dev/null 2>&1; then \
	  echo "chromium: $$(command -v chromium chromium-browser google-chrome | head -1)"; \
	else \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium; \
	fi

# The SFT warm start of docs/sft.md: textlab demos -> generated model -> LoRA
# SFT -> greedy eval, written under build/sft-recipe/ (tens of minutes on 2 cores).
.PHONY: sft-recipe
sft-recipe: build
	EMPO2=$(BIN) scripts/sft-recipe.sh

# The first run, one command: demos -> model -> SFT warm start -> EMPO² run
# (with its live page) -> eval with and without memory -> report, into
# DEMO_DIR (default build/quickstart; run again to continue an interrupted
# one). ≤ 10 minutes on 2 cores (README); on a loaded machine
# DEMO_FLAGS=--threads=1.
DEMO_DIR   ?= build/quickstart
DEMO_FLAGS ?=
.PHONY: demo
demo: build
	$(BIN) quickstart $(DEMO_FLAGS) $(DEMO_DIR)

# The EMPO² vs GRPO study of docs/experiment.md — Study 3: the warm start,
# its pre-registered gate (a failed gate stops the study), then the six arms
# (budget ≤ 120 min idle on 2 cores; quick: ≤ 10 min, its gate not enforced;
# experiment-gate: the warm start and the gate only, at the gate run's sizes).
.PHONY: experiment experiment-quick experiment-gate
experiment: build
	EMPO2=$(BIN) GO=$(GO) scripts/experiment.sh
experiment-quick: build
	EMPO2=$(BIN) GO=$(GO) scripts/experiment.sh quick
experiment-gate: build
	EMPO2=$(BIN) GO=$(GO) scripts/experiment.sh gate

# One EMPO² step at Qwen2.5-7B's shape on the CPU, one copy of the weights,
# peak RSS capped at 22 GiB (docs/training.md): writes a 15 GB model under
# .tmp/qwen7b-step/ (deleted afterwards); refuses to start with less than
# 22 GiB available. PRESET=qwen2.5-0.5b STEPS=4, DTYPE=q8_0, … see the script.
.PHONY: qwen7b-step
qwen7b-step: build
	EMPO2=$(BIN) scripts/qwen7b-step.sh

# ggml's CUDA backend, built by CMake from the pinned module's own source as a
# loadable backend library (bin/libggml-cuda.so + libggml-base.so). Needs nvcc
# and CMake, not a GPU: CUDA_ARCH (CMake's CUDA_ARCHITECTURES list) defaults to
# the compute capability of the build machine's GPUs when nvidia-smi reports
# any, else to Ampere + Hopper ("80;90"). `make cuda CUDA_ARCH=90` builds one
# architecture (half the time). See docs/gpu.md.
CUDA_ARCH ?= $(or $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | grep -E '^[0-9]+\.[0-9]+$$' | tr -d . | sort -u | paste -sd';'),80;90)
CUDA_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
cuda: deps
	@command -v $${CUDACXX:-nvcc} >/dev/null 2>&1 || { echo "make cuda: no CUDA compiler ($${CUDACXX:-nvcc} not found). On Debian 12: add 'contrib non-free' to the Components: line of /etc/apt/sources.list.d/debian.sources, then: apt-get update && apt-get install nvidia-cuda-toolkit cmake (CUDA 11.8). Elsewhere: install NVIDIA's CUDA toolkit and put its bin/ on PATH." >&2; exit 1; }
	@command -v cmake >/dev/null 2>&1 || { echo "make cuda: cmake not found: apt-get install cmake (>= 3.21)" >&2; exit 1; }
	@echo "make cuda: CUDA architectures $(CUDA_ARCH)"
	cmake -S . -B build/cuda -DCMAKE_BUILD_TYPE=Release \
		-DOLLAMA_DIR="$$(readlink -f third_party/ollama)" \
		-DCMAKE_CUDA_ARCHITECTURES="$(CUDA_ARCH)"
	cmake --build build/cuda --target ggml-cuda -j $(CUDA_JOBS)
	@mkdir -p bin && cp build/cuda/libggml-*.so* bin/

# The folder a lent GPU machine needs for scripts/gpu-check.sh (docs/gpu.md),
# carried there by the device tool (carry: build/gpu-bundle): the empo2 binary
# with portable CPU kernels (GPU_MARCH: the GPU machine's CPU is unknown; no
# AMX, like every x86-64-v3 build), xz-compressed; the pinned module's ggml
# source that the CUDA build reads, copied from the Go module cache now; the
# check scripts, CMakeLists.txt and the tiny models. Prints its size.
GPU_BUNDLE ?= build/gpu-bundle
GPU_MARCH  ?= -march=x86-64-v3
GPU_CFLAGS  = -O3 $(GPU_MARCH)$(if $(strip $(NO_AMX)),$(if $(call amx_on,-O3 $(GPU_MARCH)), $(NO_AMX)))
.PHONY: gpu-bundle
gpu-bundle: deps
	@mkdir -p build $(TMPDIR)
	CGO_CFLAGS="$(GPU_CFLAGS)" CGO_CXXFLAGS="$(GPU_CFLAGS)" $(GO) build -ldflags "-s -w -X main.version=$(VERSION)" \
		-o build/empo2-portable ./cmd/empo2
	EMPO2_BIN=build/empo2-portable GO=$(GO) MARCH_FLAGS="$(GPU_CFLAGS)" scripts/gpu-bundle.sh $(GPU_BUNDLE)

# Loads bin/libggml-cuda.so into empo2 and the training graph and checks the
# GPU-less fallback (cmd/empo2/cuda_test.go; skipped when the library is absent).
cuda-test: deps
	set -o pipefail; $(GO) test -count=1 -run 'TestCUDABackendWithoutGPU' -v ./cmd/empo2/ 2>&1 | \
		grep -E '^(=== RUN|--- |PASS|FAIL|ok |    cuda_test)'

fmt:
	gofmt -w $$(git ls-files '*.go')

vet: deps
	$(GO) vet ./...

clean:
	rm -rf bin build .tmp third_party/ollama bench.txt bench-rollout.txt
