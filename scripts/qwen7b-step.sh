#!/usr/bin/env bash
# One EMPO² training step at Qwen2.5-7B's shape on a CPU with 24 GB
# (docs/training.md, "A Qwen2.5-7B-shaped step on 24 GB"): a random-weight
# model of the preset's exact dimensions with Qwen's real vocabulary, then
# `empo2 train` for $STEPS step(s) of one task variation × 2 rollouts with
# memory on, in ONE process holding ONE copy of the weights (llama.cpp's mmap,
# read by the training graph too), with its peak RSS capped.
#
#   scripts/qwen7b-step.sh                                   # or: make qwen7b-step
#   PRESET=qwen2.5-0.5b STEPS=4 scripts/qwen7b-step.sh       # the same at 0.5B, several steps
#   DTYPE=q8_0 scripts/qwen7b-step.sh                        # a quantized base (made from the F16 file)
#   MODEL=q7b.gguf KEEP_MODEL=1 scripts/qwen7b-step.sh       # reuse a model file, keep it
#   EXTRA="--set update.transpose=in-graph" PRESET=qwen2.5-3b scripts/qwen7b-step.sh
#
# The model file is written under $OUT and deleted at the end unless
# KEEP_MODEL=1 (never commit it: 15.25 GB at 7B F16). The run refuses to
# start when less than $MIN_AVAIL_GB GB is available (MemAvailable), and is
# killed if its resident memory exceeds $MEM_LIMIT_GB GB: a memory cgroup
# when one can be made here (cgroup v1 or v2), and a watchdog polling its
# RSS every 2 s in any case. Results: $OUT/<preset>[-dtype]/ (run/,
# rss.tsv, time.txt, summary.txt).
set -euo pipefail
{ # the whole script is one command, read before it runs: editing the file meanwhile cannot break a run

EMPO2=${EMPO2:-bin/empo2}
PRESET=${PRESET:-qwen2.5-7b}
DTYPE=${DTYPE:-f16}                 # f16 | q8_0 | q4_k_m | q4_0 (quantized: from the F16 file)
TOKENIZER=${TOKENIZER:-../shared/qwen-tokenizer}
OUT=${OUT:-.tmp/qwen7b-step}
THREADS=${THREADS:-2}
STEPS=${STEPS:-1}
SEED=${SEED:-3}                     # seed 3: steps 1-4 draw one memory and one no-memory episode (mode.per rollout)
MEM_LIMIT_GB=${MEM_LIMIT_GB:-22}
MIN_AVAIL_GB=${MIN_AVAIL_GB:-$MEM_LIMIT_GB}
MODEL=${MODEL:-}
KEEP_MODEL=${KEEP_MODEL:-0}
NICE=${NICE:-10}
EXTRA=${EXTRA:-}                    # more train arguments, e.g. "--set update.transpose=in-graph"

name=$PRESET; [[ "$DTYPE" != f16 ]] && name=$PRESET-$DTYPE
dir=$OUT/$name
run=$dir/run
mkdir -p "$dir"
rm -rf "$run"
log() { echo "qwen7b-step: $*" | tee -a "$dir/summary.txt" >&2; }
: >"$dir/summary.txt"
avail_gb() { awk '/^MemAvailable:/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo; }
log "$(date -u +%FT%TZ) preset $PRESET dtype $DTYPE threads $THREADS steps $STEPS; load: $(cut -d' ' -f1-3 /proc/loadavg); MemAvailable $(avail_gb) GiB"

# 1. the model: the preset's dimensions, Qwen's vocabulary, random weights
made=0
if [[ -z "$MODEL" ]]; then
    MODEL=$dir/model-$DTYPE.gguf
    f16=$dir/model-f16.gguf
    t0=$(date +%s)
    nice -n "$NICE" "$EMPO2" model init --force --out "$f16" --preset "$PRESET" --tokenizer "$TOKENIZER" --dtype f16
    log "model init: $(du -h "$f16" | cut -f1) in $(( $(date +%s) - t0 )) s"
    if [[ "$DTYPE" != f16 ]]; then
        t0=$(date +%s)
        nice -n "$NICE" "$EMPO2" model quantize "$f16" "$MODEL" --dtype "$DTYPE" --threads "$THREADS"
        rm -f "$f16"
        log "model quantize $DTYPE: $(du -h "$MODEL" | cut -f1) in $(( $(date +%s) - t0 )) s"
    fi
    made=1
fi
cleanup() {
    [[ -n "${cg:-}" && -d "$cg" ]] && rmdir "$cg" 2>/dev/null || true
    if [[ "$made" == 1 && "$KEEP_MODEL" != 1 ]]; then rm -f "$MODEL"; fi
}
trap cleanup EXIT

a=$(avail_gb)
if awk -v a="$a" -v m="$MIN_AVAIL_GB" 'BEGIN { exit !(a < m) }'; then
    log "only $a GiB available (MemAvailable), $MIN_AVAIL_GB wanted: not starting (MIN_AVAIL_GB= to override)"
    exit 3
fi

# 2. the tips memory starts empty: a run directory must be new (train
#    refuses one that holds a memory.db but no run.json), so tips of
#    another run cannot be seeded; STEPS=2 gives step 2 the tips of step 1.

# 3. the step. One task variation × 2 rollouts, 3 environment steps of ≤ 8
#    tokens, tips of ≤ 16 tokens, 2 retrieved; per-rollout modes (p = 0.5,
#    q = 1: an episode is off-policy with tips or on-policy without), so
#    that the update has a memory (off-policy, π_old recomputed with the
#    tips) and a no-memory episode. An untrained model scores alike in every
#    episode, which gives a GRPO group no signal (and intrinsic differences
#    alone never make one): advantage.zero_var=train trains the group with
#    advantage 0, as verl's GRPO does, so that the update runs at full cost.
TRAIN=("$EMPO2" train -m "$MODEL" --env textlab --tasks melt/0 --run-dir "$run" --steps "$STEPS"
    --seed "$SEED" --threads "$THREADS"
    --set batch.tasks=1 --set batch.rollouts=2 --set context=1024
    --set rollout.step_limit=3 --set rollout.max_action_tokens=8 --set rollout.tip_max_tokens=16
    --set memory.top_k=2 --set mode.memory_prob=0.5 --set mode.offpolicy_prob=1 --set mode.per=rollout
    --set advantage.zero_var=train)
# shellcheck disable=SC2206
TRAIN+=($EXTRA)
log "command: ${TRAIN[*]}"

# a memory cgroup capped at MEM_LIMIT_GB for the run, when this system lets us make one
limit=$(( MEM_LIMIT_GB * 1024 * 1024 * 1024 ))
cg=
if v1=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ { print $3 }' /proc/self/cgroup) && [[ -n "$v1" && -d /sys/fs/cgroup/memory ]]; then
    for base in "/sys/fs/cgroup/memory$v1" /sys/fs/cgroup/memory; do
        if mkdir "$base/empo2-qwen-step-$$" 2>/dev/null; then
            cg=$base/empo2-qwen-step-$$
            if ! echo "$limit" >"$cg/memory.limit_in_bytes"; then rmdir "$cg"; cg=; fi
            break
        fi
    done
elif v2=$(awk -F: '$1 == "0" { print $3 }' /proc/self/cgroup) && [[ -n "$v2" && -f /sys/fs/cgroup/cgroup.controllers ]]; then
    if mkdir "/sys/fs/cgroup$v2/empo2-qwen-step-$$" 2>/dev/null; then
        cg=/sys/fs/cgroup$v2/empo2-qwen-step-$$
        if ! echo "$limit" >"$cg/memory.max"; then rmdir "$cg"; cg=; fi
    fi
fi
log "memory limit $MEM_LIMIT_GB GiB: ${cg:+cgroup $cg and }watchdog"

t0=$(date +%s)
(
    [[ -n "$cg" ]] && echo "$BASHPID" >"$cg/cgroup.procs"
    exec /usr/bin/time -v -o "$dir/time.txt" nice -n "$NICE" "${TRAIN[@]}"
) 2> >(tee "$dir/train.log" >&2) &
wrapper=$! # /usr/bin/time (the subshell exec'ed it); its children: empo2 (nice exec's it) and tee
# the watchdog: RSS of the train process every 2 s into rss.tsv; kill above the limit
echo -e "epoch\trss_kib\tcpu_s\tload1" >"$dir/rss.tsv"
tck=$(getconf CLK_TCK)
peak=0; killed=0
while kill -0 "$wrapper" 2>/dev/null; do
    pid=
    for c in $(pgrep -P "$wrapper" || true); do
        [[ "$(cat "/proc/$c/comm" 2>/dev/null)" != tee ]] && pid=$c
    done
    if [[ -n "$pid" && -r /proc/$pid/status ]]; then
        rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || echo 0)
        rss=${rss:-0}
        (( rss > peak )) && peak=$rss
        # user + system CPU seconds so far (fields 14, 15 of /proc/PID/stat, after the comm)
        cpu=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | awk -v t="$tck" '{ print ($12 + $13) / t }' || echo 0)
        echo -e "$(date +%s)\t$rss\t$cpu\t$(cut -d' ' -f1 /proc/loadavg)" >>"$dir/rss.tsv"
        if (( rss * 1024 > limit )); then
            log "RSS $((rss / 1024)) MiB above $MEM_LIMIT_GB GiB: killing $pid"
            kill -KILL "$pid" 2>/dev/null || true
            killed=1
        fi
    fi
    sleep 2
done
rc=0; wait "$wrapper" || rc=$?
log "train exit $rc after $(( $(date +%s) - t0 )) s$( ((killed)) && echo ' (killed by the watchdog)' || true)"
log "peak RSS: $(awk -F': ' '/Maximum resident/ { printf "%.2f GiB", $2 / 1048576 }' "$dir/time.txt") (time -v), watchdog $(awk -v k="$peak" 'BEGIN { printf "%.2f GiB", k / 1048576 }')"
grep -E 'engine:' "$dir/train.log" | tail -1 | sed 's/^/qwen7b-step: /' | tee -a "$dir/summary.txt" >&2 || true
# per step: the metrics, the peak RSS during each phase and the CPU seconds
# it used (from rss.tsv; phases in the loop's order: rollouts, tips, then
# π_old and the update; metrics' "time" is the step's end, to the second)
num() { grep -oE "\"$1\":[-0-9.e+]+" <<<"$2" | cut -d: -f2; }
phase() { # phase NAME FROM TO: peak RSS and CPU seconds of rss.tsv rows in [FROM, TO]
    awk -F'\t' -v n="$1" -v a="$2" -v b="$3" 'NR > 1 && $1 >= a && $1 <= b {
        if (!c0) c0 = $3; c1 = $3; if ($2 > r) r = $2 }
        END { printf "%s: peak RSS %.2f GiB, CPU %.0f s; ", n, r / 1048576, c1 - c0 }' "$dir/rss.tsv"
}
if [[ -f "$run/metrics.jsonl" ]]; then
    while read -r line; do
        log "$(grep -oE '"(step|mode|updates|sequences|trained_tokens|sample_tokens|masked_seqs|tips_retrieved_mean|tips_written|gen_tokens|prompt_tokens_decoded|loss|grad_norm|t_[a-z_]+)":("[^"]*"|[-0-9.e+]+)' <<<"$line" | tr -d '"' | tr '\n' ' ')"
        end=$(date -d "$(grep -oE '"time":"[^"]*"' <<<"$line" | cut -d'"' -f4)" +%s)
        start=$(awk -v e="$end" -v s="$(num t_step "$line")" 'BEGIN { printf "%d", e - s }')
        r1=$(awk -v a="$start" -v d="$(num t_rollout "$line")" 'BEGIN { printf "%d", a + d }')
        r2=$(awk -v a="$r1" -v d="$(num t_tips "$line")" 'BEGIN { printf "%d", a + d }')
        log "  $(phase rollouts "$start" "$r1")$(phase tips "$r1" "$r2")$(phase "π_old+update" "$r2" "$end")"
    done <"$run/metrics.jsonl"
fi
log "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$rc"
}
