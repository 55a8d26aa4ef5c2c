#!/usr/bin/env bash
# Stages what a lent GPU machine needs into one folder (`make gpu-bundle`, see
# docs/gpu.md): that machine has nvcc, CMake and Python but no Go and no
# network, and receives the working tree plus up to 8 git-ignored paths
# (64 MiB in all). The folder is self-contained:
#
#   empo2.xz           bin/empo2 built for portable x86-64 (EMPO2_BIN), xz-compressed
#   BUNDLE.json        commit, build flags, Go and module versions, sizes
#   gpu-check.sh       the one command to run there (scripts/gpu-check.sh)
#   gpu_hf_check.py    its transformers + PEFT part (scripts/gpu_hf_check.py)
#   CMakeLists.txt     the repository's CUDA build glue
#   ollama/ml/backend/ggml/ggml/   the pinned module's ggml source, only what
#                      the CUDA backend build reads (include, cmake, the
#                      ggml-base sources, src/ggml-cuda), copied from the Go
#                      module cache now; never committed
#   models/            tiny generated models of the agreement checks
#   qwen-tokenizer/    Qwen2.5's tokenizer (../shared/qwen-tokenizer, tokenizer.json
#                      xz-compressed), when it is there: the 7B-shaped model of the
#                      benchmark gets Qwen's real vocabulary
#
# Usage: scripts/gpu-bundle.sh OUTDIR   (env: EMPO2_BIN = the binary to stage,
# built by the Makefile with portable kernels; GO; MARCH_FLAGS = its -march)
set -euo pipefail

out=${1:?usage: gpu-bundle.sh OUTDIR}
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${EMPO2_BIN:?EMPO2_BIN: the empo2 binary to stage}
GO=${GO:-go}
cd "$repo"

module=$(readlink -f third_party/ollama)
ggml=$module/ml/backend/ggml/ggml
[[ -f $ggml/src/ggml-cuda/CMakeLists.txt ]] || { echo "gpu-bundle: no ggml CUDA source under $ggml (run make deps)" >&2; exit 1; }

rm -rf "$out"
mkdir -p "$out/models"

# The binary: it must start here (same ISA level as the GPU machine's CPU,
# which is unknown: see MARCH_FLAGS), then xz -9 (gzip -9 is 1.24x larger).
"$bin" version >/dev/null
xz -9 -T0 -c "$bin" >"$out/empo2.xz"

# ggml: the sources of ggml-base and ggml-cuda and what their CMake includes.
dst=$out/ollama/ml/backend/ggml/ggml
mkdir -p "$dst/src"
cp -r "$ggml/include" "$ggml/cmake" "$dst/"
cp "$ggml/LICENSE" "$dst/"
cp "$ggml"/src/CMakeLists.txt "$ggml"/src/*.c "$ggml"/src/*.cpp "$ggml"/src/*.h "$dst/src/"
cp -r "$ggml/src/ggml-cuda" "$dst/src/"
# ggml-quants.c (ggml-base) includes ggml-cpu/ggml-cpu-impl.h: the CPU
# backend's headers travel, not its sources.
mkdir -p "$dst/src/ggml-cpu"
cp "$ggml"/src/ggml-cpu/*.h "$dst/src/ggml-cpu/"
chmod -R u+w "$out" # the module cache is read-only

cp scripts/gpu-check.sh scripts/gpu_hf_check.py CMakeLists.txt "$out/"

tok=$repo/../shared/qwen-tokenizer
if [[ -f $tok/tokenizer.json && -f $tok/tokenizer_config.json ]]; then
	mkdir -p "$out/qwen-tokenizer"
	xz -9 -T0 -c "$tok/tokenizer.json" >"$out/qwen-tokenizer/tokenizer.json.xz"
	cp "$tok/tokenizer_config.json" "$out/qwen-tokenizer/"
	[[ -f $tok/README.md ]] && cp "$tok/README.md" "$out/qwen-tokenizer/"
else
	echo "gpu-bundle: no Qwen tokenizer at $tok: the benchmark model will have a trained BPE vocabulary" >&2
fi

"$bin" model init --force --out "$out/models/tiny-f32.gguf" --dtype f32 --log-level warn
"$bin" model init --force --out "$out/models/tiny-f16.gguf" --dtype f16 --log-level warn

commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
dirty=false
[[ -z $(git status --porcelain 2>/dev/null) ]] || dirty=true
modver=$("$GO" list -m -f '{{.Version}}' github.com/ollama/ollama)
bytes() { stat -c %s "$1"; }
cat >"$out/BUNDLE.json" <<EOF
{
  "commit": "$commit",
  "dirty": $dirty,
  "version": "$("$bin" version | head -1)",
  "march": "${MARCH_FLAGS:-unknown}",
  "go": "$("$GO" env GOVERSION)",
  "ollama_module": "$modver",
  "created": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "binary_bytes": $(bytes "$bin"),
  "binary_xz_bytes": $(bytes "$out/empo2.xz"),
  "ggml_source_bytes": $(du -sb "$out/ollama" | cut -f1)
}
EOF

total=$(du -sb "$out" | cut -f1)
echo "gpu-bundle: $out: $(awk -v b="$total" 'BEGIN{printf "%.1f MiB", b/1048576}') ($total bytes; limit for all carried paths plus the working tree: 64 MiB)"
du -sh "$out"/* | sed 's/^/  /'
if ((total > 48 * 1048576)); then
	echo "gpu-bundle: the bundle is over 48 MiB: too close to the device tool's 64 MiB limit" >&2
	exit 1
fi
