#!/usr/bin/env bash
# The EMPO² vs GRPO study of docs/experiment.md, end to end, in one command:
#   model init → demonstrations → SFT warm start → warm-start evaluation →
#   train (arms × seeds, JOBS at a time) → evaluation of every run (held-out
#   variations memory off, training pool memory off/on, adaptation trials on
#   held-out variations, OOD trials on boil/freeze) → empo2 report over all
#   runs → results table (scripts/exptable) and diagnosis.
#
#   scripts/experiment.sh            # or: make experiment        (≤ 60 min, 2 cores)
#   scripts/experiment.sh quick      # or: make experiment-quick  (≤ 10 min smoke test)
#   OUT=dir SEEDS="1 2" ARMS="grpo empo2" STEPS=20 scripts/experiment.sh
#   RESUME=1 scripts/experiment.sh   # continue in an existing OUT, skipping finished stages
#
# Everything is written under $OUT (default build/experiment, quick:
# build/experiment-quick); OUT/table.md is the results table, OUT/report/
# the curves. Every knob below is an environment variable.
set -euo pipefail

MODE=${1:-full}
case "$MODE" in
full | quick) ;;
-h | --help | help)
	sed -n '2,16p' "$0"
	exit 0
	;;
*)
	echo "experiment.sh: unknown mode '$MODE' (want full or quick)" >&2
	exit 2
	;;
esac

EMPO2=${EMPO2:-bin/empo2}
GO=${GO:-go}
if [[ "$MODE" == quick ]]; then
	OUT=${OUT:-build/experiment-quick}
	SFT_VARS=${SFT_VARS:-8}       # demonstrations per SFT family (train split)
	SFT_EPOCHS=${SFT_EPOCHS:-3}
	SEEDS=${SEEDS:-1}
	STEPS=${STEPS:-3}
	BATCH_TASKS=${BATCH_TASKS:-2}
	BATCH_ROLLOUTS=${BATCH_ROLLOUTS:-4}
	POOL=${POOL:-4}               # training variations 0..POOL-1 of the RL family
	TEST_VARS=${TEST_VARS:-6}     # held-out test variations evaluated (0: all 36)
	OOD_RL_VARS=${OOD_RL_VARS:-2} # test variations in the adaptation trials
	OOD_VARS=${OOD_VARS:-2}       # boil/freeze test variations per family (0: all)
	TRIALS=${TRIALS:-2}
	SKILL_VARS=${SKILL_VARS:-1}   # test variations per SFT family (warm-start sanity check)
else
	OUT=${OUT:-build/experiment}
	SFT_VARS=${SFT_VARS:-24}
	SFT_EPOCHS=${SFT_EPOCHS:-6}
	SEEDS=${SEEDS:-1 2 3}
	STEPS=${STEPS:-40}
	BATCH_TASKS=${BATCH_TASKS:-4}
	BATCH_ROLLOUTS=${BATCH_ROLLOUTS:-4}
	POOL=${POOL:-8}
	TEST_VARS=${TEST_VARS:-0}
	OOD_RL_VARS=${OOD_RL_VARS:-12}
	OOD_VARS=${OOD_VARS:-0}
	TRIALS=${TRIALS:-5}
	SKILL_VARS=${SKILL_VARS:-6}
fi
ARMS=${ARMS:-grpo empo2 memory-only}  # also: empo2-paper (p = 1/2, q = 1/3)
JOBS=${JOBS:-2}                       # trained runs at a time (one thread each)
THREADS=${THREADS:-2}                 # threads of the single-process phases
RL_TASK=${RL_TASK:-find-living-thing}
SFT_TASKS=${SFT_TASKS:-light-bulb,melt,use-thermometer}
RL_LR=${RL_LR:-5e-4}
MINI_BATCH=${MINI_BATCH:-0}  # 0: one optimizer step per PPO epoch, whatever the mode (equal updates per arm)
PPO_EPOCHS=${PPO_EPOCHS:-2}
OLD_LOGP=${OLD_LOGP:-rollout} # π_old from the rollout's own log-probs (no recompute pass; docs/experiment.md)
THRESHOLD=${THRESHOLD:-0.9} # hash-embedder retrieval threshold (calibration: docs/experiment.md)
CTX=${CTX:-4096}
EVAL_TEMP=${EVAL_TEMP:-0.4}
RANK=${RANK:-32}
HIDDEN=${HIDDEN:-64}
RESUME=${RESUME:-0}
SIMP=(--simplifications easy) # explore demos need "teleport to"; every phase uses the same world

die() {
	echo "experiment.sh: $*" >&2
	exit 1
}
log() { printf '%s  %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

[[ -x "$EMPO2" ]] || die "$EMPO2 not found: run 'make build' first (or set EMPO2=path)"
for c in train eval sft report; do
	"$EMPO2" "$c" --help >/dev/null 2>&1 || die "'$EMPO2 $c' is not available in this build"
done
if [[ -d "$OUT" && -n "$(ls -A "$OUT" 2>/dev/null)" && "$RESUME" != 1 ]]; then
	die "$OUT exists and is not empty: remove it, or set RESUME=1 to continue it (finished stages are skipped)"
fi
mkdir -p "$OUT/runs" "$OUT/warmstart/eval"
OUT=$(cd "$OUT" && pwd) # run configs record absolute paths
T0=$(date +%s)
[[ -f "$OUT/timing.tsv" ]] || printf 'phase\tseconds\n' >"$OUT/timing.tsv"

# stage NAME CMD…: runs CMD unless NAME finished before (RESUME=1), and
# records its wall time in timing.tsv.
stage() {
	local name=$1
	shift
	if [[ -f "$OUT/.done-$name" ]]; then
		log "skip $name (done)"
		return 0
	fi
	log "start $name"
	local t=$SECONDS
	"$@"
	printf '%s\t%d\n' "$name" $((SECONDS - t)) >>"$OUT/timing.tsv"
	touch "$OUT/.done-$name"
	log "done  $name ($((SECONDS - t)) s)"
}

pool_tasks() {
	local i out=""
	for ((i = 0; i < POOL; i++)); do out+="${out:+,}$RL_TASK/$i"; done
	echo "$out"
}
vars_flag() { [[ "$1" == 0 ]] || echo "--variations $1"; }

# ---- 1. demonstrations and the tokenizer corpus ---------------------------
demos() {
	# the corpus covers all six families (the vocabulary only; docs/experiment.md)
	"$EMPO2" env demos textlab --split train --kind explore --held-out "${SIMP[@]}" \
		-o "$OUT/corpus-demos.jsonl" --text "$OUT/corpus.txt"
	"$EMPO2" env demos textlab --tasks "$SFT_TASKS" --split train --variations "$SFT_VARS" \
		--kind explore "${SIMP[@]}" -o "$OUT/sft-train.jsonl"
	"$EMPO2" env demos textlab --tasks "$SFT_TASKS" --split dev --variations 2 \
		--kind explore "${SIMP[@]}" -o "$OUT/sft-dev.jsonl"
}

# ---- 2. the random model ----------------------------------------------------
model() {
	"$EMPO2" model init --out "$OUT/model.gguf" --corpus "$OUT/corpus.txt" --vocab 1024 \
		--layers 2 --hidden "$HIDDEN" --heads 2 --kv-heads 1 --ffn $((2 * HIDDEN)) --ctx "$CTX" --seed 1
}

# ---- 3. SFT warm start (shared by every arm) ------------------------------
sft() {
	"$EMPO2" sft -m "$OUT/model.gguf" --data "$OUT/sft-train.jsonl" --val "$OUT/sft-dev.jsonl" \
		-o "$OUT/sft.gguf" --rank "$RANK" --alpha $((2 * RANK)) --epochs "$SFT_EPOCHS" \
		--lr 5e-3 --min-lr 5e-4 --warmup 5 --batch-tokens 2048 --no-pack --micro-tokens "$CTX" \
		--threads "$THREADS" --seed 1 --resume --json >"$OUT/sft-epochs.jsonl" 2> >(tee "$OUT/sft.log" >&2)
}

# ---- 4/6. evaluation of one policy ---------------------------------------
# evaluate DIR THREADS ARGS…: ARGS name the policy (--run R | --model M --lora A);
# the JSON results go to DIR/eval/*.json.
evaluate() {
	local dir=$1 threads=$2
	shift 2
	local common=(--env textlab "${SIMP[@]}" --temperature "$EVAL_TEMP" --seed 1 --threads "$threads"
		--ctx "$CTX" --threshold "$THRESHOLD" "$@")
	local memboth=(--memory off)
	[[ "$*" == *--run* ]] && memboth=(--memory both)
	mkdir -p "$dir/eval"
	# held-out variations of the RL family, memory off (the paper's main claim)
	# shellcheck disable=SC2046
	"$EMPO2" eval "${common[@]}" --tasks "$RL_TASK" --split test --memory off $(vars_flag "$TEST_VARS") \
		-o "$dir/eval/test-off.json" || return 1
	# the training pool, memory off and (for runs) on with the run's memory
	"$EMPO2" eval "${common[@]}" --tasks "$RL_TASK" --split train --variations "$POOL" "${memboth[@]}" \
		-o "$dir/eval/pool.json" || return 1
	# adaptation on held-out variations: K trials, fresh memory vs control
	# shellcheck disable=SC2046
	"$EMPO2" eval "${common[@]}" --ood --tasks "$RL_TASK" --split test $(vars_flag "$OOD_RL_VARS") \
		--trials "$TRIALS" -o "$dir/eval/ood-rl-test.json" || return 1
	# OOD families boil and freeze (the held-out tasks)
	# shellcheck disable=SC2046
	"$EMPO2" eval "${common[@]}" --ood --split test $(vars_flag "$OOD_VARS") --trials "$TRIALS" \
		-o "$dir/eval/ood-heldout.json" || return 1
}

warmstart() {
	evaluate "$OUT/warmstart" "$THREADS" --model "$OUT/model.gguf" --lora "$OUT/sft.gguf"
	# sanity check: the warm start on its own SFT families (held-out variations)
	"$EMPO2" eval --env textlab "${SIMP[@]}" --temperature "$EVAL_TEMP" --seed 1 --threads "$THREADS" \
		--ctx "$CTX" --model "$OUT/model.gguf" --lora "$OUT/sft.gguf" --tasks "$SFT_TASKS" \
		--split test --variations "$SKILL_VARS" --memory off -o "$OUT/warmstart/eval/sft-families-test-off.json"
}

# ---- 5. one trained run, then its evaluation -------------------------------
arm_flags() {
	case "$1" in
	grpo) echo "--preset grpo" ;;
	empo2) echo "--preset empo2" ;;
	memory-only) echo "--preset memory-only" ;;
	empo2-paper) echo "--preset empo2 --set mode.memory_prob=0.5 --set mode.offpolicy_prob=0.3333" ;;
	*) return 1 ;;
	esac
}

run_one() {
	local arm=$1 seed=$2
	local dir="$OUT/runs/$arm-s$seed"
	local flags
	flags=$(arm_flags "$arm")
	mkdir -p "$dir"
	if [[ ! -f "$dir/.trained" ]]; then
		if [[ -f "$dir/config.yaml" ]]; then
			# an interrupted run (RESUME=1): continue from its checkpoint and config.yaml
			"$EMPO2" train --run-dir "$dir" --resume --steps "$STEPS" --threads 1 >>"$dir/train.log" 2>&1 || return 1
		else
			# shellcheck disable=SC2086
			"$EMPO2" train $flags --model "$OUT/model.gguf" --env textlab --tasks "$(pool_tasks)" \
				--steps "$STEPS" --seed "$seed" --threads 1 --run-dir "$dir" \
				--set "lora.init=$OUT/sft.gguf" --set "lora.rank=$RANK" --set "lora.alpha=$((2 * RANK))" \
				--set "batch.tasks=$BATCH_TASKS" --set "batch.rollouts=$BATCH_ROLLOUTS" \
				--set "context=$CTX" --set env_options.simplifications=easy \
				--set "memory.threshold=$THRESHOLD" --set "update.lr=$RL_LR" \
				--set "update.mini_batch=$MINI_BATCH" --set "update.ppo_epochs=$PPO_EPOCHS" \
				--set "update.old_logp=$OLD_LOGP" >>"$dir/train.log" 2>&1 || return 1
		fi
		touch "$dir/.trained"
	fi
	if [[ ! -f "$dir/.evaluated" ]]; then
		local policy=(--run "$dir")
		# a run without a checkpoint (no updates) is evaluated with the warm start's adapter
		[[ -e "$dir/checkpoints/latest" ]] || policy+=(--lora "$OUT/sft.gguf")
		evaluate "$dir" 1 "${policy[@]}" >>"$dir/eval.log" 2>&1 || return 1
		if [[ -f "$dir/memory.db" ]]; then
			"$EMPO2" memory export --db "$dir/memory.db" --out "$dir/memory.jsonl" >>"$dir/eval.log" 2>&1 || return 1
		fi
		touch "$dir/.evaluated"
	fi
}

runs() {
	local arm seed
	for arm in $ARMS; do arm_flags "$arm" >/dev/null || die "unknown arm '$arm' (have grpo, empo2, memory-only, empo2-paper)"; done
	rm -f "$OUT/.failed"
	for seed in $SEEDS; do
		for arm in $ARMS; do
			while (($(jobs -rp | wc -l) >= JOBS)); do wait -n || true; done
			log "run $arm seed $seed (logs: $OUT/runs/$arm-s$seed/{train,eval}.log)"
			# run_one runs in a || list, where set -e is off: it returns on the first failure itself
			{ run_one "$arm" "$seed" || echo "$arm-s$seed" >>"$OUT/.failed"; } &
		done
	done
	wait
	if [[ -s "$OUT/.failed" ]]; then
		die "failed runs: $(tr '\n' ' ' <"$OUT/.failed")(see their train.log / eval.log)"
	fi
}

# ---- 7. report and table ---------------------------------------------------
report() {
	local dirs=("$OUT"/runs/*/ "$OUT/warmstart")
	"$EMPO2" report "${dirs[@]%/}" --out "$OUT/report" --title "EMPO² vs GRPO on textlab ($MODE)"
}

table() {
	"$GO" build -o "$OUT/exptable" ./scripts/exptable
	"$OUT/exptable" -out "$OUT" -diagnosis "$OUT/diagnosis.md" >"$OUT/table.md"
}

stage demos demos
stage model model
stage sft sft
stage warmstart warmstart
stage runs runs
stage report report
stage table table
printf 'total\t%d\n' $(($(date +%s) - T0)) >>"$OUT/timing.tsv"
cat "$OUT/table.md"
log "finished in $(($(date +%s) - T0)) s: $OUT/table.md, $OUT/diagnosis.md, $OUT/report/report.html"
