#!/usr/bin/env bash
# gpu-diag.sh OUTDIR — diagnosis of the first GPU check's failures (docs/gpu.md,
# "First run on a GPU"): builds the CUDA backend with the bundle's gpu-check.sh
# (build phase only), then, each step under its own timeout, logs to OUTDIR:
#   symbols   the crash addresses of the first run resolved in the same build
#   train     `check train` on the tiny F32 model with CUDA_LAUNCH_BLOCKING=1
#             (the op that faults is the one reported), own weights and --shared
#   free      the llama_free segfault under gdb (C backtrace), and with CUDA
#             graphs disabled
#   sanitizer compute-sanitizer memcheck on the training forward
set -u
OUT=${1:?usage: gpu-diag.sh OUTDIR}
mkdir -p "$OUT"
B=$(cd "$(dirname "$0")/.." && pwd)/build/gpu-bundle
GPU_CHECK_PHASES=build GPU_CHECK_TIME=${GPU_DIAG_BUILD_TIME:-260} "$B/gpu-check.sh" "$OUT/check" >"$OUT/check.log" 2>&1
W=${TMPDIR:-/tmp}/empo2-gpu-check
E=$W/bin/empo2 L=$W/cuda/libggml-cuda.so M=$W/models
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
ch=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
export LD_LIBRARY_PATH=$ch/lib64:$ch/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[[ -f $L ]] || { echo "no $L: see check.log"; tail -20 "$OUT/check.log"; exit 1; }
run() { # name seconds cmd...
	local n=$1 s=$2; shift 2
	echo "### $n: $*" >>"$OUT/diag.log"
	local t0=$SECONDS
	timeout -k 3 "$s" "$@" >>"$OUT/diag.log" 2>&1
	echo "### $n: exit $? in $((SECONDS - t0)) s" >>"$OUT/diag.log"
}
{
	echo "## symbols"
	addr2line -f -C -i -e "$L" 0x170469 0x174568 0x185b81 0x189803 0x18b96e 2>&1
	nm -C "$L" 2>/dev/null | sort | awk '$1 <= "0000000000170469"' | tail -3
} >"$OUT/symbols.log" 2>&1
run train-blocking 25 env CUDA_LAUNCH_BLOCKING=1 "$E" --backend "$L" check train -m "$M/tiny-f32.gguf" --device gpu --threads 16 --out "$OUT/train-own.json"
run train-shared-blocking 25 env CUDA_LAUNCH_BLOCKING=1 "$E" --backend "$L" check train -m "$M/tiny-f32.gguf" --device gpu --shared --threads 16 --out "$OUT/train-shared.json"
run free-gdb 40 gdb -q -batch -ex 'handle SIGURG nostop noprint pass' -ex 'handle SIGPIPE nostop noprint pass' \
	-ex run -ex bt -ex 'info registers rip' --args "$E" --backend "$L" check rollout -m "$M/tiny-f32.gguf" --gpu-layers -1 --threads 16 --out "$OUT/rollout-gdb.json"
run free-nographs 25 env GGML_CUDA_DISABLE_GRAPHS=1 "$E" --backend "$L" check rollout -m "$M/tiny-f32.gguf" --gpu-layers -1 --threads 16 --out "$OUT/rollout-nographs.json"
cs=$(command -v compute-sanitizer || ls "$ch"/bin/compute-sanitizer "$ch"/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
[[ -n $cs ]] && run sanitizer 60 "$cs" --tool memcheck --print-limit 3 "$E" --backend "$L" check train -m "$M/tiny-f32.gguf" --device gpu --threads 16 --out "$OUT/train-cs.json"
tar czf "$OUT/logs.tar.gz" -C "$W" logs 2>/dev/null
grep -v '^\s\|^runtime\.\|^goroutine\|^$' "$OUT/diag.log" | cut -c1-300 | tail -120
cat "$OUT/symbols.log"
