#!/usr/bin/env bash
# The whole GPU verification as one command (docs/gpu.md):
#
#   gpu-check.sh OUTDIR
#
# writes OUTDIR/gpu-report.json, OUTDIR/gpu-report.md and
# OUTDIR/gpu-logs.tar.gz, rewritten after every phase so that a run cut
# short leaves a report of what it finished. Phases, in order:
#
#   setup       the empo2 binary (unpacked from the bundle), the machine, the models
#   build       libggml-cuda.so for this GPU's architecture only, with the flash-attention
#               kernels and fatbin compression off (needs nvidia-smi, nvcc, cmake)
#   rollouts    greedy generation with every layer offloaded against the CPU (another
#               process without the backend), batched = single
#   rollouts-attn  the F32 model's device rollouts again with an F16 KV cache and/or
#               llama.cpp's flash attention, each against the same CPU reference: where
#               the device's log-probs part from the CPU's (diagnostic: figures, no bound)
#   train       the LoRA training graph on the GPU against the CPU engine, same batch
#   bench       Qwen2.5-7B-shaped model (generated here, in parallel, in the background
#               from the start): rollout tokens/s at batch 1, 8, 64, the LoRA step on
#               16 x 512 tokens, peak GPU memory
#   train-e2e   `empo2 train` steps on the 7B shape (memory on, an off-policy step,
#               pi_old recomputed by the engine), their phases (metrics.jsonl)
#   hf-bench    the same LoRA step in transformers + PEFT, and the ratio
#   hf-export   the adapter as PEFT, the base and the merged model as transformers folders
#   hf          transformers + PEFT give empo2's log-probs and LoRA gradients (python3
#               with torch, transformers, peft)
#
# On a GPU the order puts what was never measured first (the 7B step beside PEFT's
# and train-e2e), inside one 600 s call: setup 5 + build 145 (the 7B model is written
# meanwhile, on every core) + rollouts 20 + rollouts-attn 15 + train 20 + bench 150 +
# train-e2e 150 + hf-bench 60 = 565 s at worst, 540 s the default limit; the
# correctness phases measured on earlier calls (hf-export, hf) come last.
#
# Each phase has the time it needs to be started and a hard budget; a phase
# that no longer fits the time left (GPU_CHECK_TIME, default 540 s) is not
# started, and the report says why. Without a GPU the same script is the CPU
# dry run: the build and the Python parts are skipped when their tools are
# absent, the "device" runs are CPU runs, and the benchmark uses a tiny shape.
#
# Run from the bundle of `make gpu-bundle` (build/gpu-bundle/gpu-check.sh) or
# from the repository (scripts/gpu-check.sh, with bin/empo2 built).
#
# Environment: GPU_CHECK_TIME (s, total), GPU_CHECK_RESERVE (s kept for the
# last report, default 10), GPU_CHECK_WORK (work folder, default
# $TMPDIR/empo2-gpu-check), GPU_CHECK_PHASES (run only these, space-separated),
# GPU_CHECK_NEED_<phase> (override a phase's start need, s; '-' becomes '_'),
# GPU_CHECK_CUDA_ARCH (build for this architecture without a GPU),
# GPU_CHECK_NO_GPU=1 (treat the machine as GPU-less), EMPO2 (the binary),
# GPU_CHECK_THREADS (CPU threads of the checks, default: all cores),
# GPU_CHECK_JOBS (parallel compile jobs of the build, default: all cores),
# GPU_CHECK_REBUILD=1 (do not reuse an earlier build on this machine),
# GPU_CHECK_BIG (the benchmark model's `empo2 model init` flags),
# GPU_CHECK_GEN_PROCS (cores that generate it, default 4),
# GPU_CHECK_TOKENIZER (its Hugging Face tokenizer folder, or none; default:
# the bundle's Qwen tokenizer, or ../shared/qwen-tokenizer in the repository).
set -uo pipefail

# ---- a phase body, run by the main script under timeout: gpu-check.sh --phase NAME
if [[ ${1:-} == --phase ]]; then
	phase_main=1
else
	phase_main=0
	[[ $# -eq 1 ]] || { echo "usage: gpu-check.sh OUTDIR" >&2; exit 2; }
	mkdir -p "$1" || exit 2
	export GC_OUT=$(cd "$1" && pwd)
fi

# ---- settings shared by the main script and the phase bodies (exported)
if ((phase_main == 0)); then
	export GC_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
	export GC_WORK=${GPU_CHECK_WORK:-${TMPDIR:-/tmp}/empo2-gpu-check}
	export GC_TOTAL=${GPU_CHECK_TIME:-540}
	export GC_RESERVE=${GPU_CHECK_RESERVE:-10}
	export GC_THREADS=${GPU_CHECK_THREADS:-$(nproc)}
	if [[ -f $GC_HERE/empo2.xz || -f $GC_HERE/BUNDLE.json ]]; then
		export GC_MODE=bundle GC_SRC=$GC_HERE GC_OLLAMA=$GC_HERE/ollama
	else
		export GC_MODE=repo GC_SRC=$(cd "$GC_HERE/.." && pwd)
		export GC_OLLAMA=$(readlink -f "$GC_SRC/third_party/ollama" 2>/dev/null || true)
	fi
	export GC_BIN=$GC_WORK/bin/empo2
	# the GPU, if any: name, compute capability (e.g. 9.0), driver, memory
	GC_GPU=""
	if [[ -z ${GPU_CHECK_NO_GPU:-} ]] && command -v nvidia-smi >/dev/null 2>&1; then
		# only a real answer ("NVIDIA H100 80GB HBM3, 9.0, 580.159.04, 81559 MiB"):
		# without a driver nvidia-smi prints its complaint on stdout
		GC_GPU=$(nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader 2>/dev/null |
			grep -E '^[^,]+, *[0-9]+\.[0-9]+ *,' | head -1)
	fi
	export GC_GPU
	export GC_ARCH=${GPU_CHECK_CUDA_ARCH:-$(cut -d, -f2 <<<"$GC_GPU" | tr -d ' .')}
	export GC_NVCC=$(command -v nvcc || { [[ -x /usr/local/cuda/bin/nvcc ]] && echo /usr/local/cuda/bin/nvcc; } || true)
	# the CUDA runtime and cuBLAS that libggml-cuda.so links, for the dynamic
	# loader (CMake's build RPATH should already name them)
	if [[ -n $GC_NVCC ]]; then
		cuda_home=$(dirname "$(dirname "$(readlink -f "$GC_NVCC")")")
		for d in "$cuda_home/lib64" "$cuda_home/targets/x86_64-linux/lib"; do
			[[ -d $d ]] && LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
		done
		export LD_LIBRARY_PATH
	fi
	# sizes: the real ones with a GPU, tiny ones for the CPU dry run
	if [[ -n $GC_GPU ]]; then
		# Qwen2.5-7B's dimensions (28 layers, hidden 3584, 28 heads, 4 KV heads,
		# FFN 18944, vocab 152064), a 4096-token context, F16
		export GC_BIG="--preset qwen2.5-7b --ctx 4096 --dtype f16"
		export GC_BIG_PY="--layers 28 --hidden 3584 --heads 28 --kv-heads 4 --ffn 18944 --vocab 152064"
		export GC_BENCH="--batches 1,8,64 --gen-tokens 64 --prompt-tokens 64 --train-seqs 16 --train-len 512 --micro-tokens 2048 --steps 2"
		export GC_PYBENCH="--seqs 16 --len 512 --micro 4 --steps 2"
		export GC_SMALL="--layers 2 --hidden 512 --heads 4 --kv-heads 2 --ffn 1024 --vocab 2048"
	else
		# the preset and vocabulary of the real run, in a tiny shape
		export GC_BIG="--preset qwen2.5-7b --layers 2 --hidden 128 --heads 4 --kv-heads 2 --ffn 256 --ctx 1024 --dtype f16"
		export GC_BIG_PY="--layers 2 --hidden 128 --heads 4 --kv-heads 2 --ffn 256 --vocab 1024"
		export GC_BENCH="--batches 1,2,4 --gen-tokens 8 --prompt-tokens 16 --train-seqs 4 --train-len 64 --micro-tokens 128 --steps 2"
		export GC_PYBENCH="--seqs 4 --len 64 --micro 2 --steps 2"
		export GC_SMALL="--layers 2 --hidden 256 --heads 2 --kv-heads 1 --ffn 512 --vocab 1024"
	fi
	[[ -n ${GPU_CHECK_BIG:-} ]] && export GC_BIG=$GPU_CHECK_BIG
fi

LOG() { echo "[gpu-check $(date +%T)] $*"; }
now() { echo "${EPOCHREALTIME:-$(date +%s.%N)}"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; } # seconds since $1 (a now), 0.1 s

# json_str: a JSON string literal (control characters dropped)
json_str() {
	local s
	s=$(printf '%s' "$1" | tr -d '\000-\010\013-\037')
	s=${s//\\/\\\\}
	s=${s//\"/\\\"}
	s=${s//$'\n'/\\n}
	s=${s//$'\t'/\\t}
	printf '"%s"' "$s"
}

# ---- phase bodies. Each writes its results under $GC_WORK, lists them in
# $GC_RESULTS (one path per line, relative to $GC_WORK), and exits non-zero
# when a check failed (after running the others).
fails=0
result() { echo "$1" >>"$GC_RESULTS"; }
step() { # step CMD...: run, log, count a failure
	echo "+ $*"
	"$@"
	local rc=$?
	if ((rc != 0)); then
		echo "step failed (exit $rc): $*"
		fails=$((fails + 1))
	fi
	return $rc
}
E() { "$GC_BIN" --log-level warn "$@"; }
backend() { # the --backend flag when the CUDA backend was built
	[[ -f $GC_WORK/cuda/libggml-cuda.so ]] && printf -- '--backend\n%s\n' "$GC_WORK/cuda/libggml-cuda.so"
}
device() { # the training device under test: gpu with a GPU and the backend, else auto (the CPU)
	if [[ -n $GC_GPU && -f $GC_WORK/cuda/libggml-cuda.so ]]; then echo gpu; else echo auto; fi
}

phase_build() {
	local b=$GC_WORK/cuda stamp
	# what the library is built from: a rerun on the same (still warm)
	# machine reuses it unless GPU_CHECK_REBUILD is set
	stamp="arch $GC_ARCH; nvcc $("$GC_NVCC" --version | tail -1); $(cat "$GC_SRC/CMakeLists.txt" "$GC_SRC/BUNDLE.json" 2>/dev/null | cksum); $GC_OLLAMA"
	if [[ -z ${GPU_CHECK_REBUILD:-} && -f $b/libggml-cuda.so && -f $b/build.json && $(cat "$b/stamp" 2>/dev/null) == "$stamp" ]]; then
		echo "reusing $b/libggml-cuda.so (same sources, architecture and nvcc)"
		sed 's/^{"kind": "build",/{"kind": "build", "reused": true,/' "$b/build.json" >"$GC_WORK/build.json"
		result build.json
		step "$GC_BIN" --backend "$b/libggml-cuda.so" --log-level info version
		return $fails
	fi
	rm -rf "$b"
	mkdir -p "$b"
	local gen=() jobs=${GPU_CHECK_JOBS:-$(nproc)}
	command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
	local t0
	t0=$(now)
	step cmake "${gen[@]}" -S "$GC_SRC" -B "$b" -DCMAKE_BUILD_TYPE=Release -DOLLAMA_DIR="$GC_OLLAMA" \
		-DCMAKE_CUDA_COMPILER="$GC_NVCC" -DCMAKE_CUDA_ARCHITECTURES="${GC_ARCH}-real" \
		-DGGML_CUDA_FA=OFF -DGGML_CUDA_COMPRESSION_MODE=none || return 1
	local conf
	conf=$(since "$t0")
	local t1
	t1=$(now)
	step cmake --build "$b" --target ggml-cuda -j "$jobs" || return 1
	local comp
	comp=$(since "$t1")
	local lib=$b/libggml-cuda.so
	[[ -f $lib ]] || { echo "no $lib after the build"; return 1; }
	cat >"$b/build.json" <<EOF
{"kind": "build", "cuda_arch": $(json_str "$GC_ARCH"), "nvcc": $(json_str "$("$GC_NVCC" --version | tail -2 | head -1)"),
 "options": "GGML_CUDA_FA=OFF GGML_CUDA_COMPRESSION_MODE=none CMAKE_CUDA_ARCHITECTURES=${GC_ARCH}-real",
 "jobs": $jobs, "configure_s": $conf, "compile_s": $comp,
 "cuda_objects": $(find "$b" -name '*.cu.o' | wc -l), "library_bytes": $(stat -c %s "$lib")}
EOF
	cp "$b/build.json" "$GC_WORK/build.json"
	ldd "$lib" | grep -E 'cuda|cublas|ggml|not found' # what the loader resolves
	echo "$stamp" >"$b/stamp"
	result build.json
	# the library loads and sees the GPU
	step "$GC_BIN" --backend "$lib" --log-level info version || return 1
	return $fails
}

# rollouts on MODEL: the CPU reference in a process without the backend,
# then the device run against it
rollout_pair() {
	local name=$1 noise=${2:-}
	local ref=rollout-$name-cpu.json dev=rollout-$name-device.json
	local extra=()
	[[ -n $noise ]] && extra=(--noise-model "$GC_WORK/models/$noise.gguf")
	step E check rollout --force -m "$GC_WORK/models/$name.gguf" --threads "$GC_THREADS" --out "$GC_WORK/$ref" "${extra[@]}" && result "$ref" || return
	mapfile -t be < <(backend)
	step E "${be[@]}" check rollout --force -m "$GC_WORK/models/$name.gguf" --gpu-layers -1 --threads "$GC_THREADS" \
		--reference "$GC_WORK/$ref" --out "$GC_WORK/$dev"
	[[ -f $GC_WORK/$dev ]] && result "$dev"
}

phase_rollouts() {
	rollout_pair tiny-f32
	rollout_pair small-f32
	rollout_pair tiny-f16 tiny-f32
	rollout_pair small-f16 small-f32
	return $fails
}

# the attention variants: the tiny F32 model's device run with an F16 KV
# cache and/or flash attention, each against the CPU reference of the
# rollouts phase (default context: F32 cache, no flash attention). The
# log-prob gap to the CPU of each variant says which part of llama.cpp's
# attention path the device's gap comes from; a variant that differs is a
# figure, not a failure.
phase_rollouts_attn() {
	local ref=rollout-tiny-f32-cpu.json kv fa out
	[[ -f $GC_WORK/$ref ]] || { echo "no $ref: the rollouts phase did not write it"; return 1; }
	mapfile -t be < <(backend)
	for v in f16:off f32:on f16:on; do
		kv=${v%:*} fa=${v#*:}
		out=rollout-tiny-f32-device-kv$kv-fa$fa.json
		echo "+ check rollout --kv-type $kv --flash-attn $fa"
		E "${be[@]}" check rollout --force -m "$GC_WORK/models/tiny-f32.gguf" --gpu-layers -1 --threads "$GC_THREADS" \
			--kv-type "$kv" --flash-attn "$fa" --reference "$GC_WORK/$ref" --out "$GC_WORK/$out" ||
			echo "variant kv $kv, flash attention $fa: differs from the CPU (exit $?; a figure, not a failure)"
		[[ -f $GC_WORK/$out ]] && result "$out" || { echo "no $out"; fails=$((fails + 1)); }
	done
	return $fails
}

phase_train() {
	local dev
	dev=$(device)
	mapfile -t be < <(backend)
	step E "${be[@]}" check train --force -m "$GC_WORK/models/tiny-f32.gguf" --device $dev --shared --threads "$GC_THREADS" \
		--out "$GC_WORK/train-tiny-f32.json"
	[[ -f $GC_WORK/train-tiny-f32.json ]] && result train-tiny-f32.json
	step E "${be[@]}" check train --force -m "$GC_WORK/models/small-f32.gguf" --device $dev --shared --threads "$GC_THREADS" \
		--dump "$GC_WORK/hf" --out "$GC_WORK/train-small-f32.json"
	[[ -f $GC_WORK/train-small-f32.json ]] && result train-small-f32.json
	# F16 weights: the engine keeps them in F16; held to looser bounds
	step E "${be[@]}" check train --force -m "$GC_WORK/models/small-f16.gguf" --device $dev --shared --threads "$GC_THREADS" \
		--logprob-tol 1e-2 --grad-tol 1e-2 --out "$GC_WORK/train-small-f16.json"
	[[ -f $GC_WORK/train-small-f16.json ]] && result train-small-f16.json
	return $fails
}

phase_hf_export() {
	local m=$GC_WORK/models/small-f32.gguf h=$GC_WORK/hf
	[[ -f $h/adapter.gguf ]] || { echo "no $h/adapter.gguf: the train phase did not dump it"; return 1; }
	rm -rf "$h/peft" "$h/base" "$h/merged" "$h/zero.gguf"
	step E lora init --force --model "$m" --rank 8 --alpha 16 --out "$h/zero.gguf" || return 1
	step E export --force --model "$m" --lora "$h/zero.gguf" --format hf --merged --out "$h/base" || return 1
	step E export --force --model "$m" --lora "$h/adapter.gguf" --format peft --out "$h/peft" || return 1
	step E export --force --model "$m" --lora "$h/adapter.gguf" --format hf --merged --out "$h/merged" || return 1
	ls -la "$h" "$h/peft" "$h/base"
	return $fails
}

phase_hf() {
	local h=$GC_WORK/hf
	step python3 "$GC_HERE/gpu_hf_check.py" agree --dump "$h/hf-check.json" --base "$h/base" --peft "$h/peft" \
		--merged "$h/merged" --out "$GC_WORK/hf-check.json"
	[[ -f $GC_WORK/hf-check.json ]] && result hf-check.json
	return $fails
}

# peak GPU memory while a command runs: nvidia-smi every 200 ms
mem_start() {
	MEM_LOG=$GC_WORK/mem-$1.log
	MEM_BASE=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
	nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$MEM_LOG" 2>/dev/null &
	MEM_PID=$!
}
mem_stop() { # mem_stop NAME WHAT
	kill "$MEM_PID" 2>/dev/null
	wait "$MEM_PID" 2>/dev/null
	local peak n
	peak=$(sort -n "$MEM_LOG" | tail -1)
	n=$(wc -l <"$MEM_LOG")
	[[ -n $peak && -n $MEM_BASE ]] || return 0
	cat >"$GC_WORK/gpumem-$1.json" <<EOF
{"kind": "gpu-memory", "process": $(json_str "$2"), "baseline_mib": $MEM_BASE, "peak_mib": $peak,
 "peak_minus_baseline_mib": $((peak - MEM_BASE)), "samples": $n, "interval_ms": 200}
EOF
	result "gpumem-$1.json"
}

# the 7B-shaped model, made in the background from the start (model_bg)
wait_big_model() {
	while [[ ! -f $GC_WORK/models/big.done ]]; do sleep 1; done
	local rc
	rc=$(cat "$GC_WORK/models/big.done")
	[[ $rc == 0 ]] || { echo "generating the benchmark model failed (exit $rc):"; tail -5 "$GC_WORK/logs/model-big.log"; return 1; }
	echo "benchmark model ready: $(cat "$GC_WORK/models/big.seconds") s to generate"
}

phase_bench() {
	wait_big_model || return 1
	mapfile -t be < <(backend)
	local layers=0
	[[ -n ${be[*]} ]] && layers=-1
	[[ -n $GC_GPU ]] && mem_start bench
	result bench.json # written after each part: a run cut short reports what it measured
	# shellcheck disable=SC2086
	step E "${be[@]}" check bench --force -m "$GC_WORK/models/big.gguf" --gpu-layers $layers --threads "$GC_THREADS" $GC_BENCH \
		--out "$GC_WORK/bench.json"
	[[ -n $GC_GPU ]] && mem_stop bench "empo2 check bench (rollouts + training in one process)"
	return $fails
}

phase_hf_bench() {
	# torch.compile only in what the phase and the run can spare: the
	# correctness phases after this one (hf-export, hf) need ~40 s
	local spare=$((GC_RUN_LEFT - 40))
	((spare > GC_PHASE_LIMIT)) && spare=$GC_PHASE_LIMIT
	# shellcheck disable=SC2086
	result hf-bench.json # the eager figures are written before torch.compile starts
	step python3 "$GC_HERE/gpu_hf_check.py" bench $GC_BIG_PY $GC_PYBENCH --time-left "$spare" --compile-need 120 \
		--empo2 "$GC_WORK/bench.json" --out "$GC_WORK/hf-bench.json"
	return $fails
}

phase_train_e2e() {
	wait_big_model || return 1
	mapfile -t be < <(backend)
	local dev
	dev=$(device)
	rm -rf "$GC_WORK/run"
	[[ -n $GC_GPU ]] && mem_start train
	# Random weights score alike, and a GRPO group of equal rewards trains
	# nothing: the mode is drawn per episode (half of them memory rollouts,
	# whose intrinsic reward 1/(retrieved + 1) the others lack), so a group
	# of 4 has different rewards unless all 4 draw the same (1/8 per group);
	# no masking (every random-model log-prob is under the threshold); half
	# the memory episodes are off-policy (16 episodes: some are), pi_old is
	# the engine's recompute; the second step is the warm one. metrics.jsonl
	# gets a line per step.
	result run/metrics.jsonl
	step E "${be[@]}" train --preset empo2 -m "$GC_WORK/models/big.gguf" --env textlab --run-dir "$GC_WORK/run" \
		--steps 2 --threads "$GC_THREADS" --set device=$dev --set batch.tasks=4 --set batch.rollouts=4 \
		--set rollout.step_limit=1 --set mode.per=rollout --set mode.memory_prob=0.5 --set mode.offpolicy_prob=0.5 \
		--set update.micro_batch=1 --set update.low_prob_mask=never --set update.old_logp=recompute
	[[ -n $GC_GPU ]] && mem_stop train "empo2 train, two steps"
	return $fails
}

if ((phase_main == 1)); then
	export GC_RESULTS=$GC_WORK/phases/current.results
	"phase_${2//-/_}"
	exit $?
fi

# ---- the main script
START=$SECONDS
START_T=$(now)
# a fresh work folder (only what this script writes there is removed; the
# CUDA build stays for the build phase to reuse)
rm -rf "$GC_WORK"/{phases,logs,models,bin,hf,run} "$GC_WORK"/*.json "$GC_WORK"/mem-*.log
rm -f "$GC_OUT/gpu-report.json" "$GC_OUT/gpu-report.md" "$GC_OUT/gpu-logs.tar.gz"
mkdir -p "$GC_WORK"/{phases,logs,models,bin}
PHASE_N=0
CUR_PID=""
CUR_REC=""
CUR_NAME=""

# write_rec FILE NAME STATUS SECONDS NEED BUDGET REASON
write_rec() {
	local results="" r
	if [[ -f $GC_WORK/phases/current.results ]]; then
		while read -r r; do
			[[ -n $r ]] && results+="${results:+, }$(json_str "$r")"
		done <"$GC_WORK/phases/current.results"
	fi
	cat >"$1.tmp" <<EOF
{"name": $(json_str "$2"), "status": $(json_str "$3"), "seconds": $4, "need_s": $5, "budget_s": $6,
 "reason": $(json_str "$7"), "results": [$results], "log": $(json_str "logs/$2.log")}
EOF
	mv "$1.tmp" "$1"
}

write_meta() {
	local bundle=null
	[[ -f $GC_SRC/BUNDLE.json ]] && bundle=$(cat "$GC_SRC/BUNDLE.json")
	cat >"$GC_WORK/meta.json.tmp" <<EOF
{"started": $(json_str "$STARTED"), "elapsed_s": $((SECONDS - START)), "limit_s": $GC_TOTAL, "mode": $(json_str "$GC_MODE"),
 "gpu": $(json_str "${GC_GPU:-none}"), "cuda_arch": $(json_str "${GC_ARCH:-}"),
 "nvcc": $(json_str "$([[ -n $GC_NVCC ]] && "$GC_NVCC" --version | tail -2 | head -1 || echo none)"),
 "cpu": $(json_str "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"), "cores": $(nproc),
 "threads": $GC_THREADS, "load_at_start": $(json_str "$LOAD0"), "load_now": $(json_str "$(cut -d' ' -f1-3 /proc/loadavg)"),
 "memory": $(json_str "$(free -g | awk '/^Mem:/{print $2 " GiB"}')"), "python3": $(json_str "$(python3 --version 2>&1 || echo none)"),
 "empo2": $(json_str "$("$GC_BIN" version 2>/dev/null | head -1)"), "bundle": $bundle}
EOF
	mv "$GC_WORK/meta.json.tmp" "$GC_WORK/meta.json"
}

# report: the Go renderer, or (if the binary cannot run) the records as they are
report() {
	write_meta
	if ! "$GC_BIN" --log-level error check report --force "$GC_WORK" "$GC_OUT" 2>"$GC_WORK/logs/report.err"; then
		{
			echo '{"phases": ['
			local first=1 f
			for f in "$GC_WORK"/phases/[0-9]*.json; do
				[[ -f $f ]] || continue
				((first)) || echo ,
				cat "$f"
				first=0
			done
			echo '], "meta": '
			cat "$GC_WORK/meta.json"
			echo ', "pass": false, "note": "empo2 check report failed; these are the raw phase records"}'
		} >"$GC_OUT/gpu-report.json"
		{
			echo "# empo2 GPU check (raw: \`empo2 check report\` failed: $(head -c 300 "$GC_WORK/logs/report.err"))"
			echo
			for f in "$GC_WORK"/phases/[0-9]*.json; do [[ -f $f ]] && { cat "$f"; echo; }; done
		} >"$GC_OUT/gpu-report.md"
	fi
	# logs: the last 4 MB of each
	local l
	for l in "$GC_WORK"/logs/*.log; do
		[[ -f $l ]] && (($(stat -c %s "$l") > 4194304)) && { tail -c 4194304 "$l" >"$l.t" && mv "$l.t" "$l"; }
	done
	tar -czf "$GC_OUT/gpu-logs.tar.gz.tmp" -C "$GC_WORK" logs 2>/dev/null && mv "$GC_OUT/gpu-logs.tar.gz.tmp" "$GC_OUT/gpu-logs.tar.gz"
}

stop_big() { # the background model generation, and its empo2 process, unless it has ended
	[[ -n ${BIG_PID:-} ]] || return 0
	if [[ ! -f $GC_WORK/models/big.done ]]; then
		pkill -TERM -P "$BIG_PID" 2>/dev/null
		kill "$BIG_PID" 2>/dev/null
	fi
	wait "$BIG_PID" 2>/dev/null
	BIG_PID=""
}

# end_group PID: a phase's timeout leads its own process group; whatever of
# that group outlives it (a command that handles TERM slowly, e.g. empo2
# train checkpointing) is killed, so that it holds no CPU or GPU memory
# while the next phases run
end_group() { kill -KILL -- "-$1" 2>/dev/null; }

on_signal() {
	LOG "interrupted ($1)"
	if [[ -n $CUR_PID ]]; then
		kill -TERM "$CUR_PID" 2>/dev/null
		wait "$CUR_PID" 2>/dev/null
		end_group "$CUR_PID"
		write_rec "$CUR_REC" "$CUR_NAME" interrupted "$(since "$CUR_T0")" "$CUR_NEED" "$CUR_BUDGET" "stopped by $1 after $(since "$CUR_T0") s"
	fi
	stop_big
	report
	exit 130
}
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT

wanted() { [[ -z ${GPU_CHECK_PHASES:-} || " $GPU_CHECK_PHASES " == *" $1 "* ]]; }

# phase NAME NEED BUDGET [SKIP_REASON]: run phase_NAME under its budget,
# unless the reason is set, it was not asked for, or it does not fit.
phase() {
	local name=$1 need=$2 budget=$3 skip=${4:-}
	local var=GPU_CHECK_NEED_${name//-/_}
	need=${!var:-$need}
	wanted "$name" || return 0
	PHASE_N=$((PHASE_N + 1))
	local rec
	rec=$GC_WORK/phases/$(printf %02d $PHASE_N)-$name.json
	rm -f "$GC_WORK/phases/current.results"
	local left=$((GC_TOTAL - (SECONDS - START) - GC_RESERVE))
	if [[ -n $skip ]]; then
		LOG "$name: skipped: $skip"
		write_rec "$rec" "$name" skipped 0 "$need" "$budget" "$skip"
		report
		return 0
	fi
	if ((need > left || left < 1)); then
		LOG "$name: not started: needs ~$need s, $left s left"
		write_rec "$rec" "$name" skipped 0 "$need" "$budget" "not started: needs ~$need s, $left s left of the $GC_TOTAL s limit"
		report
		return 0
	fi
	local lim=$((budget < left ? budget : left))
	LOG "$name: started (needs ~$need s, budget $lim s, $left s left)"
	CUR_NAME=$name CUR_REC=$rec CUR_T0=$(now) CUR_NEED=$need CUR_BUDGET=$lim
	write_rec "$rec" "$name" running 0 "$need" "$lim" "started; the run ended before it did"
	report
	GC_PHASE_LIMIT=$lim GC_RUN_LEFT=$left timeout -k 10 "$lim" "$GC_HERE/gpu-check.sh" --phase "$name" >"$GC_WORK/logs/$name.log" 2>&1 &
	CUR_PID=$!
	wait "$CUR_PID"
	local rc=$?
	end_group "$CUR_PID"
	CUR_PID=""
	local secs status=ok reason=""
	secs=$(since "$CUR_T0")
	case $rc in
	0) ;;
	124 | 137) status=timeout reason="stopped at its $lim s limit" ;;
	*)
		status=failed
		reason="exit $rc: $(grep -E '^(empo2: |step failed|Traceback|[A-Za-z]*Error)' "$GC_WORK/logs/$name.log" | tail -3 | tr '\n' ' ')"
		;;
	esac
	LOG "$name: $status in $secs s${reason:+ ($reason)}"
	write_rec "$rec" "$name" $status $secs "$need" "$lim" "$reason"
	report
}

STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
LOG "mode $GC_MODE, work $GC_WORK, limit $GC_TOTAL s, GPU: ${GC_GPU:-none}"

# unxz_to SRC DST: xz, or Python's lzma where the xz tool is missing
unxz_to() {
	if command -v xz >/dev/null 2>&1; then
		xz -dc "$1" >"$2"
	else
		python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"
	fi
}

# ---- setup (always: every report needs the binary)
PHASE_N=1
rm -f "$GC_WORK/phases/current.results"
setup_rec=$GC_WORK/phases/01-setup.json
(
	set -e
	if [[ -n ${EMPO2:-} ]]; then
		cp "$EMPO2" "$GC_BIN"
	elif [[ $GC_MODE == bundle ]]; then
		unxz_to "$GC_HERE/empo2.xz" "$GC_BIN"
	else
		cp "$GC_SRC/bin/empo2" "$GC_BIN"
	fi
	chmod +x "$GC_BIN"
	"$GC_BIN" version
	for m in tiny-f32 tiny-f16; do
		if [[ -f $GC_SRC/models/$m.gguf ]]; then
			cp "$GC_SRC/models/$m.gguf" "$GC_WORK/models/"
		else
			"$GC_BIN" --log-level warn model init --force --out "$GC_WORK/models/$m.gguf" --dtype "${m#tiny-}"
		fi
	done
	# Qwen's real vocabulary for the 7B-shaped model, when the bundle (or,
	# in the repository, ../shared) has it
	if [[ -n ${GPU_CHECK_TOKENIZER:-} ]]; then
		[[ $GPU_CHECK_TOKENIZER == none ]] || ln -sfn "$(cd "$GPU_CHECK_TOKENIZER" && pwd)" "$GC_WORK/models/qwen-tokenizer"
	elif [[ $GC_MODE == repo && -f $GC_SRC/../shared/qwen-tokenizer/tokenizer.json ]]; then
		ln -sfn "$(cd "$GC_SRC/../shared/qwen-tokenizer" && pwd)" "$GC_WORK/models/qwen-tokenizer"
	elif [[ -f $GC_SRC/qwen-tokenizer/tokenizer.json.xz ]]; then
		mkdir -p "$GC_WORK/models/qwen-tokenizer"
		cp "$GC_SRC/qwen-tokenizer/tokenizer_config.json" "$GC_WORK/models/qwen-tokenizer/"
		unxz_to "$GC_SRC/qwen-tokenizer/tokenizer.json.xz" "$GC_WORK/models/qwen-tokenizer/tokenizer.json"
	fi
	# shellcheck disable=SC2086
	"$GC_BIN" --log-level warn model init --force --out "$GC_WORK/models/small-f32.gguf" $GC_SMALL --dtype f32 --seed 2
	# shellcheck disable=SC2086
	"$GC_BIN" --log-level warn model init --force --out "$GC_WORK/models/small-f16.gguf" $GC_SMALL --dtype f16 --seed 2
) >"$GC_WORK/logs/setup.log" 2>&1
setup_rc=$?
if ((setup_rc != 0)); then
	write_rec "$setup_rec" setup failed "$(since "$START_T")" 0 0 "exit $setup_rc: $(tail -2 "$GC_WORK/logs/setup.log" | tr '\n' ' ')"
	report
	LOG "setup failed: see $GC_WORK/logs/setup.log"
	exit 1
fi

# the benchmark model, in the background from now on: its tensors are
# generated in parallel (modelgen: each from its own generator), on
# GPU_CHECK_GEN_PROCS cores (default 4 of the build's; one core took 210 s
# for the 7B shape)
rm -f "$GC_WORK/models/big.done" "$GC_WORK/models/big.gguf"
if wanted bench || wanted train-e2e; then
	(
		t0=$(now)
		tok=()
		[[ -f $GC_WORK/models/qwen-tokenizer/tokenizer.json ]] && tok=(--tokenizer "$GC_WORK/models/qwen-tokenizer")
		# shellcheck disable=SC2086
		GOMAXPROCS=${GPU_CHECK_GEN_PROCS:-4} "$GC_BIN" --log-level info model init --force --out "$GC_WORK/models/big.gguf" $GC_BIG "${tok[@]}" --seed 3 --max-size 20GiB \
			>"$GC_WORK/logs/model-big.log" 2>&1
		rc=$?
		since "$t0" >"$GC_WORK/models/big.seconds"
		echo $rc >"$GC_WORK/models/big.done"
	) &
	BIG_PID=$!
fi
write_rec "$setup_rec" setup ok "$(since "$START_T")" 0 0 "binary $($GC_BIN version | head -1); models made; benchmark model generating in the background"
report

# ---- the phases: name, seconds needed to start, budget, and a reason to skip
hf_skip="python3 with torch, transformers and peft is not available here"
python3 -c 'import torch, transformers, peft' >/dev/null 2>&1 && hf_skip=""
build_skip=""
if [[ -z $GC_ARCH ]]; then
	build_skip="no GPU (nvidia-smi reports none) and no GPU_CHECK_CUDA_ARCH: the CPU dry run does not build the CUDA backend"
elif [[ -z $GC_NVCC ]] || ! command -v cmake >/dev/null 2>&1; then
	build_skip="nvcc or cmake is missing"
elif [[ ! -f $GC_OLLAMA/ml/backend/ggml/ggml/src/ggml-cuda/CMakeLists.txt ]]; then
	build_skip="no ggml source under ${GC_OLLAMA:-third_party/ollama}"
fi

if [[ -n $GC_GPU ]]; then
	phase build 90 330 "$build_skip"
	if [[ ! -f $GC_WORK/cuda/libggml-cuda.so ]]; then
		LOG "no CUDA backend: the GPU phases would only repeat the CPU dry run; stopping"
		stop_big
		report
		exit 1
	fi
	phase rollouts 20 60
	phase rollouts-attn 10 30
	phase train 20 60
	phase bench 60 150
	phase train-e2e 60 150
	phase hf-bench 40 120 "$hf_skip"
	phase hf-export 5 30
	phase hf 20 60 "$hf_skip"
else
	# GPU_CHECK_CUDA_ARCH without a GPU: the build alone is measured (give it GPU_CHECK_TIME)
	phase build 0 "$GC_TOTAL" "$build_skip"
	phase rollouts 3 120
	phase rollouts-attn 3 120
	phase train 3 120
	phase bench 5 180
	phase train-e2e 10 300
	phase hf-bench 10 180 "$hf_skip"
	phase hf-export 2 60
	phase hf 10 120 "$hf_skip"
fi
stop_big
report
LOG "done in $((SECONDS - START)) s: $GC_OUT/gpu-report.md"
awk '/^\| phase \|/ { on = 1 } on && /^$/ { exit } on' "$GC_OUT/gpu-report.md" # the phase table
