#!/usr/bin/env bash
# gpu-diag.sh OUTDIR — the short diagnosis of the training engine on a GPU
# (docs/gpu.md, "Diagnosing the training engine"). Builds the CUDA backend
# with gpu-check.sh (setup and build phases only: the models, the binary,
# libggml-cuda.so, reused when a build of the same sources is on the
# machine), then runs, each under its own timeout:
#
#   train-nodes      check train, own weights, --compare-nodes: every node of
#                    the forward and training graphs against the CPU, node by
#                    node and in one go (the first node beyond tolerance, and
#                    whether only the one-go compute differs)
#   train-notf32     the same with NVIDIA_TF32_OVERRIDE=0: cuBLAS's F32
#                    products in full F32 (ggml-cuda asks for TF32), to tell
#                    TF32 rounding from a defect
#   train-nofusion   the same with GGML_CUDA_DISABLE_FUSION=1
#   train-nographs   the same with GGML_CUDA_DISABLE_GRAPHS=1
#   train-shared     check train --shared --compare-nodes with
#                    CUDA_LAUNCH_BLOCKING=1 (a fault names its op) and
#                    --log-level trace (the scheduler's splits are on stderr
#                    before a crash)
#   rollout          check rollout, every layer offloaded (exit 0 expected)
#   sanitizer        compute-sanitizer memcheck on check train, when present
#
# then prints each step's exit status and seconds, the one-line node
# verdicts and the scheduler splits. The steps take well under 90 s after
# the build on an H100 (timeouts sum to 150 s). The device tool brings back
# at most 8 files of OUTDIR, so every step writes to the work folder and
# OUTDIR gets, refreshed after each step: summary.txt, diag.tar.gz (every
# step's log and JSON, steps.tsv, the setup/build report and check.log),
# and train-nodes.json, train-notf32.json, train-shared.json as they are.
#
# Without a GPU it is the dry run of the same steps: no build, and
# `--backend sim` (a host-memory stand-in for a GPU: the engine's device
# code paths on the CPU kernels, where every difference must be exactly 0)
# instead of the CUDA library.
#
# Run from the repository with bin/empo2 built, or with build/gpu-bundle
# (`make gpu-bundle`) beside it, which it then uses. Environment:
# GPU_DIAG_BUILD_TIME (s for setup and build, default 260),
# GPU_DIAG_THREADS (CPU threads of the checks; default 4 with a GPU, 1 for
# the dry run).
set -u
OUT=${1:?usage: gpu-diag.sh OUTDIR}
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd -P)
REPO=$(cd "$(dirname "$0")/.." && pwd)
CHECK=$REPO/build/gpu-bundle/gpu-check.sh
[[ -x $CHECK ]] || CHECK=$REPO/scripts/gpu-check.sh
W=${GPU_CHECK_WORK:-${TMPDIR:-/tmp}/empo2-gpu-check}
D=$W/diag # every step's output; OUTDIR gets copies (pack)
case "$OUT/" in
"$(readlink -m "$D")"/*) # D is emptied below: it must not hold OUTDIR
	echo "gpu-diag.sh: OUTDIR $OUT is inside the work folder $D, which each run empties; choose another" >&2
	exit 2
	;;
esac
rm -rf "$D"
mkdir -p "$D" || exit 2
pack() {
	tar -czf "$OUT/diag.tar.gz.tmp" -C "$W" diag && mv "$OUT/diag.tar.gz.tmp" "$OUT/diag.tar.gz"
	local f
	for f in train-nodes.json train-notf32.json train-shared.json summary.txt; do
		[[ -f $D/$f ]] && cp "$D/$f" "$OUT/"
	done
}
T0=$SECONDS
GPU_CHECK_PHASES=build GPU_CHECK_TIME=${GPU_DIAG_BUILD_TIME:-260} "$CHECK" "$D/check" >"$D/check.log" 2>&1
pack
E=$W/bin/empo2 M=$W/models
[[ -x $E && -f $M/tiny-f32.gguf ]] || { echo "setup failed: see check.log in $OUT/diag.tar.gz"; tail -20 "$D/check.log"; exit 1; }
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [[ -x $nvcc ]]; then
	ch=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
	export LD_LIBRARY_PATH=$ch/lib64:$ch/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
L=$W/cuda/libggml-cuda.so
if [[ -f $L ]]; then
	MODE=cuda
elif nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader 2>/dev/null | grep -qE '^[^,]+, *[0-9]+\.[0-9]+'; then
	echo "a GPU but no $L: see check.log in $OUT/diag.tar.gz"
	tail -20 "$D/check.log"
	exit 1
else
	MODE=dry-run L=sim
fi
# the reference engine is tiny: few threads (node by node, more only cost thread starts)
TH=${GPU_DIAG_THREADS:-$([[ $MODE == cuda ]] && echo 4 || echo 1)}
BUILD_S=$((SECONDS - T0))
: >"$D/steps.tsv"
run() { # run NAME SECONDS CMD...: output to NAME.log
	local n=$1 s=$2 t0=$SECONDS rc
	shift 2
	echo "+ $*" >"$D/$n.log"
	timeout -k 3 "$s" "$@" >>"$D/$n.log" 2>&1
	rc=$?
	printf '%s\t%s\t%s\n' "$n" "$rc" "$((SECONDS - t0))" >>"$D/steps.tsv"
	pack
}
train() { # train NAME SECONDS [ENV=V...] -- FLAGS...: check train on tiny-f32
	local n=$1 s=$2 envs=()
	shift 2
	while [[ $1 != -- ]]; do envs+=("$1"); shift; done
	shift
	run "$n" "$s" env "${envs[@]}" "$E" --backend "$L" check train -m "$M/tiny-f32.gguf" --device gpu --threads "$TH" \
		--out "$D/$n.json" "$@"
}
T1=$SECONDS
train train-nodes 25 -- --compare-nodes
train train-notf32 20 NVIDIA_TF32_OVERRIDE=0 -- --compare-nodes
train train-nofusion 20 GGML_CUDA_DISABLE_FUSION=1 -- --compare-nodes
train train-nographs 20 GGML_CUDA_DISABLE_GRAPHS=1 -- --compare-nodes
train train-shared 25 CUDA_LAUNCH_BLOCKING=1 -- --shared --compare-nodes --log-level trace
run rollout 20 "$E" --backend "$L" check rollout -m "$M/tiny-f32.gguf" --gpu-layers -1 --threads "$TH" --out "$D/rollout.json"
cs=$(command -v compute-sanitizer || ls "${ch:-/usr/local/cuda}"/bin/compute-sanitizer "${ch:-/usr/local/cuda}"/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
if [[ $MODE == cuda && -n $cs ]]; then
	run sanitizer 20 "$cs" --tool memcheck --print-limit 3 "$E" --backend "$L" check train -m "$M/tiny-f32.gguf" --device gpu \
		--threads "$TH" --out "$D/train-cs.json"
fi
{
	echo "## gpu-diag: $MODE, backend $L; setup and build $BUILD_S s, steps $((SECONDS - T1)) s"
	printf 'step\texit\tseconds\n'
	cat "$D/steps.tsv"
	for f in "$D"/train-*.log; do
		echo "## ${f##*/}"
		# the verdicts, the pass/fail line, and a fault or an abort
		grep -aE 'compare-nodes:|results disagree|check result written|failed|error|GGML_ASSERT|SIGSEGV|SIGABRT' "$f" | grep -av -e '"level":"trace"' -e ' TRC ' | cut -c1-600 | head -12
	done
	echo "## scheduler splits before a crash (train-shared, last graph)"
	grep -a '## SPLIT' "$D/train-shared.log" | tail -4 | cut -c1-300
	echo "## rollout"
	tail -3 "$D/rollout.log" | cut -c1-300
	[[ -f $D/sanitizer.log ]] && { echo "## sanitizer"; grep -aE 'ERROR SUMMARY|Invalid|========= ' "$D/sanitizer.log" | head -8 | cut -c1-300; }
} | tee "$D/summary.txt"
pack
