#!/usr/bin/env bash
# The EMPO² vs GRPO study of docs/experiment.md (Study 3), end to end, in one command:
#   model init → demonstrations → full-SFT warm start (a new base model,
#   OUT/sft.gguf) → the pre-registered gate (can the warm start use its
#   memory? scripts/exptable -gate; a failed gate stops the study) →
#   warm-start evaluation → train a fresh LoRA on that base
#   (arms × seeds, JOBS at a time) → evaluation of every run (held-out
#   variations memory off, training pool memory off/on, adaptation trials on
#   held-out variations, OOD trials on boil/freeze) → empo2 report over all
#   runs → results table with the pre-registered decision (scripts/exptable)
#   and diagnosis.
#
#   scripts/experiment.sh            # or: make experiment        (≤ 120 min; with WARM=s17 at 48 steps: Study 3 67.0 min, Study 3b 50.0 min measured, 2 cores)
#   scripts/experiment.sh quick      # or: make experiment-quick  (≤ 10 min smoke test, 355 s measured idle; its gate is not enforced)
#   scripts/experiment.sh gate       # the warm start and its gate only, at the gate run's sizes (docs/experiment.md)
#   OUT=dir SEEDS="1 2" ARMS="grpo empo2" STEPS=20 scripts/experiment.sh
#   RESUME=1 scripts/experiment.sh   # continue in an existing OUT, skipping finished stages
#   UNTIL=warmstart scripts/experiment.sh  # stop after a stage (chain | demos model sft readsft | warm, then gate warmstart runs report)
#   WARM=build/p7/s17.gguf scripts/experiment.sh  # a given warm start (a full-SFT base model) instead of
#                                    # building one: the demos/model/sft/readsft stages become one "warm" stage
#   RECIPE=sft scripts/experiment.sh # build the warm start as gate runs 1-8 did (demos, sft, readsft) instead of
#                                    # the default probe chain to s17 (one "chain" stage; docs/experiment.md, gate run 10)
#
# Everything is written under $OUT (default build/experiment, quick:
# build/experiment-quick); OUT/table.md is the results table, OUT/report/
# the curves, OUT/timing.tsv the seconds per phase. Every knob below is an
# environment variable.
set -euo pipefail

MODE=${1:-full}
case "$MODE" in
full | quick | gate) ;;
-h | --help | help)
	sed -n '2,20p' "$0"
	exit 0
	;;
*)
	echo "experiment.sh: unknown mode '$MODE' (want full, quick or gate)" >&2
	exit 2
	;;
esac

EMPO2=${EMPO2:-bin/empo2}
GO=${GO:-go}
if [[ "$MODE" == quick ]]; then
	OUT=${OUT:-build/experiment-quick}
	SFT_VARS=${SFT_VARS:-12}      # demonstrations per SFT family (train split; melt has 18)
	RL_SFT_VARS=${RL_SFT_VARS:-8} # demonstrations of the RL family (variations RL_SFT_FROM…)
	SFT_EPOCHS=${SFT_EPOCHS:-9}   # full SFT (every weight); docs/experiment.md (10 epochs: 607 s in all, idle, 2026-12-02)
	SEEDS=${SEEDS:-1}
	STEPS=${STEPS:-3}
	BATCH_TASKS=${BATCH_TASKS:-2}
	BATCH_ROLLOUTS=${BATCH_ROLLOUTS:-4}
	POOL=${POOL:-4}               # training variations 0..POOL-1 of the RL family
	TEST_VARS=${TEST_VARS:-6}     # held-out test variations evaluated (0: all 36)
	OOD_RL_VARS=${OOD_RL_VARS:-2} # test variations in the adaptation trials
	OOD_VARS=${OOD_VARS:-1}       # boil/freeze test variations per family (0: all)
	TRIALS=${TRIALS:-2}
	SKILL_VARS=${SKILL_VARS:-1}   # test variations per SFT family (warm-start sanity check)
	GATE_SEEDS=${GATE_SEEDS:-1}   # a smoke test: one seed, so the gate cannot pass and is not enforced
	GATE_ENFORCE=${GATE_ENFORCE:-0}
	GATE_TRIALS=${GATE_TRIALS:-2}
	GATE_HELDOUT=${GATE_HELDOUT:-2}
	READ_RECORDS=${READ_RECORDS:-2}       # read records exercised at smoke-test size (the full study's 8 and 2
	SFT_READ_RECORDS=${SFT_READ_RECORDS:-0} # doubled the quick SFT's tokens: 239k per epoch, past its 10 minutes)
	READ_SFT_EPOCHS=${READ_SFT_EPOCHS:-1} # the reading stage, exercised at smoke-test size
	READ_SFT_VARS=${READ_SFT_VARS:-2}
	READ_SFT_RECORDS=${READ_SFT_RECORDS:-4}
elif [[ "$MODE" == gate ]]; then
	# the gate run of docs/experiment.md (Study 3, issue 36): the warm start
	# at reduced SFT sizes, then the gate; sized for ≤ 40 min on the shared
	# 2-core machine
	OUT=${OUT:-build/experiment-gate}
	SFT_VARS=${SFT_VARS:-8}
	RL_SFT_VARS=${RL_SFT_VARS:-8}
	SFT_EPOCHS=${SFT_EPOCHS:-8}
	SEEDS=${SEEDS:-1}
	STEPS=${STEPS:-0}
	BATCH_TASKS=${BATCH_TASKS:-4}
	BATCH_ROLLOUTS=${BATCH_ROLLOUTS:-4}
	POOL=${POOL:-8}
	TEST_VARS=${TEST_VARS:-0}
	OOD_RL_VARS=${OOD_RL_VARS:-4}
	OOD_VARS=${OOD_VARS:-2}
	TRIALS=${TRIALS:-3}
	SKILL_VARS=${SKILL_VARS:-2}
	ATTEMPT_TIPS=${ATTEMPT_TIPS:-0} # tip writing is not what the gate tests (the entries' action and score are code-written)
	UNTIL=${UNTIL:-gate}
else
	OUT=${OUT:-build/experiment}
	SFT_VARS=${SFT_VARS:-24}
	RL_SFT_VARS=${RL_SFT_VARS:-16}
	SFT_EPOCHS=${SFT_EPOCHS:-16}
	SEEDS=${SEEDS:-1 2 3}
	STEPS=${STEPS:-48} # ≥ 15 off-policy updates per EMPO² seed: probability ≈ 0.9986 per seed (docs/experiment.md, gate run 9 and Study 3)
	BATCH_TASKS=${BATCH_TASKS:-4}
	BATCH_ROLLOUTS=${BATCH_ROLLOUTS:-4}
	POOL=${POOL:-8}
	TEST_VARS=${TEST_VARS:-0}
	OOD_RL_VARS=${OOD_RL_VARS:-4}
	OOD_VARS=${OOD_VARS:-2}
	TRIALS=${TRIALS:-3}
	SKILL_VARS=${SKILL_VARS:-4}
fi
ARMS=${ARMS:-grpo empo2 empo2-paper memory-only oracle} # the pre-registered arms (docs/experiment.md, Study 3)
JOBS=${JOBS:-2}                       # trained runs at a time (one thread each)
THREADS=${THREADS:-2}                 # threads of the single-process phases
RL_TASK=${RL_TASK:-find-living-thing}
SFT_TASKS=${SFT_TASKS:-light-bulb,melt,use-thermometer}
RL_SFT_FROM=${RL_SFT_FROM:-8}         # first RL-family variation in SFT (the pool 0..POOL-1 stays unseen)
RL_LR=${RL_LR:-1e-4}                 # LoRA lr of the RL updates (constant): calibrated on s17 (docs/experiment.md, "The RL step size, calibrated"; Study 3 ran at 3e-3)
MINI_BATCHES=${MINI_BATCHES:-4} # mini-batches per PPO epoch (update.mini_batches): PPO_EPOCHS × this = 8 updates per step in every arm (Study 3)
MICRO_BATCH=${MICRO_BATCH:-1}   # sequences per forward/backward (update.micro_batch): 1 = no padding to a mini-batch's longest episode, 2.8x faster updates (docs/experiment.md, Study 3c); Studies 3, 3b: 8
PPO_EPOCHS=${PPO_EPOCHS:-2}
OLD_LOGP=${OLD_LOGP:-rollout} # π_old from the rollout's own log-probs (no recompute pass; docs/experiment.md)
if [[ "$MODE" == full ]]; then RECIPE=${RECIPE:-chain}; else RECIPE=${RECIPE:-sft}; fi # how the warm start is built (no WARM):
# chain: the probe chain to s17 from a fresh model (scripts/probe-scratch.sh chain; docs/experiment.md, gate run 10; its
# stages' sizes are its own, not SFT_*); sft: demos → full SFT → reading stage (gate runs 1–8; no gate passed on it)
WARM=${WARM:-} # a warm start to use as OUT/sft.gguf instead of building one (the probe chain's build/p7/s17.gguf in Study 3's run)
STEP_LIMIT=${STEP_LIMIT:-15} # episode length in simulator moves, in runs, evaluations and the gate (Study 3: 15, as gate runs 7-9; 0: the task's own 30)
KEY=${KEY:-observation}     # memory.key of runs, eval and the SFT's memory records (docs/experiment.md, Study 3: memory settings)
THRESHOLD=${THRESHOLD:-0.99} # retrieval threshold: observation keys of the same state ≥ 0.97, other rooms' listings ≤ 0.92; 0.99 since gate run 7 (docs/experiment.md, Study 3)
TIPS_IN=${TIPS_IN:-last-turn} # memory.tips_in of runs and eval (Study 3; Study 2's runs: every-turn with TOP_K=1)
SFT_TIPS_IN=${SFT_TIPS_IN:-$TIPS_IN} # placement in the SFT's memory records
HELDOUT_EPISODES=${HELDOUT_EPISODES:-3} # episodes per held-out variation in the primary measurement (Study 3b: 3; Study 3 had 1)
CTX=${CTX:-4096}
EVAL_TEMP=${EVAL_TEMP:-0.4}
RANK=${RANK:-8}          # rank of the fresh RL LoRA on the SFT base (alpha 2·rank)
TOP_K=${TOP_K:-3}        # tips per prompt (memory.top_k; eval --top-k): one last-turn block of 3 fits (docs/experiment.md, Study 3)
SFT_LR=${SFT_LR:-3e-3}   # full SFT: peak lr (cosine to SFT_MIN_LR)
SFT_MIN_LR=${SFT_MIN_LR:-3e-4}
SFT_MAXLEN=${SFT_MAXLEN:-2048} # tokens per SFT record (these demos + tip turn fit; a cut one is refused); 2 per forward
HIDDEN=${HIDDEN:-64}
TIP_RECORDS=${TIP_RECORDS:-0}         # per RL-family SFT episode: Study 2's records with retrieved tips in the prompt (0: none; Study 3 uses READ_RECORDS)
SFT_TIP_RECORDS=${SFT_TIP_RECORDS:-0} # the same for the other SFT families
READ_RECORDS=${READ_RECORDS:-8}       # per RL-family SFT episode: memory-reading records (env demos --read-records; docs/experiment.md, Study 3)
SFT_READ_RECORDS=${SFT_READ_RECORDS:-2} # the same for the other SFT families
GATE_SEEDS=${GATE_SEEDS:-$(seq -s ' ' 1 10)} # evaluation seeds of the gate: the paired rule needs 10 (docs/experiment.md, gate run 9)
GATE_TRIALS=${GATE_TRIALS:-3}         # adaptation trials per variation in the gate (trials 2…K decide)
GATE_POOL=${GATE_POOL:-$POOL}         # training-pool variations of the gate
GATE_HELDOUT=${GATE_HELDOUT:-4}       # held-out variations of the gate's adaptation test
GATE_ENFORCE=${GATE_ENFORCE:-1}       # a failed gate stops the study (1) or is only reported (0)
READ_SFT_EPOCHS=${READ_SFT_EPOCHS:-2} # > 0: a second SFT stage on memory-reading records only (docs/experiment.md, Study 3, gate runs 2 and 3; 0: none)
READ_SFT_VARS=${READ_SFT_VARS:-16}    # its RL-family demos (variations RL_SFT_FROM…, outside the pool)
READ_SFT_RECORDS=${READ_SFT_RECORDS:-24} # its read records per demo (at most the demo's steps)
TIP_TEMP=${TIP_TEMP:-0}               # tip-writing temperature (rollout.tip_temperature; <0: the rollout's 1.0)
ATTEMPT_TIPS=${ATTEMPT_TIPS:-8}       # per RL-family SFT demo: tip turns after attempts gone astray, with their true tips (env demos --attempt-tips; docs/experiment.md, the tip-teaching run)
RESUME=${RESUME:-0}
UNTIL=${UNTIL:-} # stop after this stage (then RESUME=1 continues)
SIMP=(--simplifications easy) # explore demos need "teleport to"; every phase uses the same world
LIMIT=()                      # --step-limit of the RL family's evaluations and the gate; runs get env_options.step_limit

die() {
	echo "experiment.sh: $*" >&2
	exit 1
}
log() { printf '%s  %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

((POOL <= RL_SFT_FROM || RL_SFT_VARS == 0)) || die "POOL=$POOL overlaps the RL-family SFT demonstrations (variations $RL_SFT_FROM…): raise RL_SFT_FROM"
[[ "$STEP_LIMIT" =~ ^[0-9]+$ ]] || die "STEP_LIMIT=$STEP_LIMIT: want a whole number of moves (0: the task's own)"
[[ "$RECIPE" == chain || "$RECIPE" == sft ]] || die "RECIPE=$RECIPE: want chain or sft"
[[ -z "$WARM" || -f "$WARM" ]] || die "WARM=$WARM: no such file (a full-SFT base model, e.g. build/p7/s17.gguf)"
((STEP_LIMIT == 0)) || LIMIT=(--step-limit "$STEP_LIMIT")
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
		[[ "$name" != "$UNTIL" ]] || exit 0
		return 0
	fi
	log "start $name"
	RAN=1
	local t=$SECONDS
	"$@"
	printf '%s\t%d\n' "$name" $((SECONDS - t)) >>"$OUT/timing.tsv"
	touch "$OUT/.done-$name"
	log "done  $name ($((SECONDS - t)) s)"
	if [[ "$name" == "$UNTIL" ]]; then
		log "stopping after $name (UNTIL); RESUME=1 continues"
		exit 0
	fi
}

pool_tasks() {
	local i out=""
	for ((i = 0; i < POOL; i++)); do out+="${out:+,}$RL_TASK/$i"; done
	echo "$out"
}
vars_flag() { [[ "$1" == 0 ]] || echo "--variations $1"; }

# ---- 1. demonstrations and the tokenizer corpus ---------------------------
demos() {
	# memory-reading records (--read-records, Study 3): per-step records whose
	# prompts carry the memory block the rollout would show, retrieved with
	# the RL runs' key, threshold and top-k from a memory of the demo (score
	# 100) and of attempts that deviate from it (low scores), answered with
	# the demo's action; Study 2's tip records (--tip-records) when asked for
	local tips=(--key "$KEY" --threshold "$THRESHOLD" --top-k "$TOP_K" --tips-in "$SFT_TIPS_IN")
	local failtips=()
	((TIP_RECORDS == 0)) || failtips=(--failure-tips)
	# the corpus covers all six families and the tip blocks (the vocabulary only; docs/experiment.md)
	"$EMPO2" env demos textlab --force --split train --kind explore --held-out "${SIMP[@]}" --tip-records 1 \
		-o "$OUT/corpus-demos.jsonl" --text "$OUT/corpus.txt"
	"$EMPO2" env demos textlab --force --tasks "$SFT_TASKS" --split train --variations "$SFT_VARS" \
		--kind explore "${SIMP[@]}" "${tips[@]}" --tip-records "$SFT_TIP_RECORDS" --read-records "$SFT_READ_RECORDS" -o "$OUT/sft-train.jsonl"
	"$EMPO2" env demos textlab --force --tasks "$SFT_TASKS" --split dev --variations 2 \
		--kind explore "${SIMP[@]}" "${tips[@]}" --tip-records "$SFT_TIP_RECORDS" --read-records "$SFT_READ_RECORDS" -o "$OUT/sft-dev.jsonl"
	if ((RL_SFT_VARS > 0)); then
		# a few demonstrations of the RL family, from train variations outside the
		# pool (RL_SFT_FROM…): without them the warm start never focuses on a
		# creature and RL has nothing beyond the +10 to learn (docs/experiment.md)
		"$EMPO2" env demos textlab --force --tasks "$RL_TASK" --split train --skip-variations "$RL_SFT_FROM" \
			--variations "$RL_SFT_VARS" --kind explore "${SIMP[@]}" "${failtips[@]}" "${tips[@]}" --tip-records "$TIP_RECORDS" \
			--read-records "$READ_RECORDS" --attempt-tips "$ATTEMPT_TIPS" -o "$OUT/rl-sft.jsonl"
		# every episode of the pool stays unseen
		local low
		low=$(grep -o '"variation":[0-9]*' "$OUT/rl-sft.jsonl" | cut -d: -f2 | sort -n | head -1)
		((low >= POOL)) || die "rl-sft.jsonl holds pool variation $low (< POOL=$POOL)"
		(($(grep '"steps":' "$OUT/rl-sft.jsonl" | grep -v '"failed":true' | grep -v '"read":true' | grep -vc '"attempt":true') == RL_SFT_VARS)) ||
			die "expected $RL_SFT_VARS $RL_TASK demonstrations in rl-sft.jsonl"
		cat "$OUT/rl-sft.jsonl" >>"$OUT/sft-train.jsonl"
		"$EMPO2" env demos textlab --force --tasks "$RL_TASK" --split dev --variations 2 \
			--kind explore "${SIMP[@]}" "${failtips[@]}" "${tips[@]}" --tip-records "$TIP_RECORDS" --read-records "$READ_RECORDS" -o "$OUT/rl-dev.jsonl"
		cat "$OUT/rl-dev.jsonl" >>"$OUT/sft-dev.jsonl"
	fi
}

# ---- 2. the random model ----------------------------------------------------
model() {
	"$EMPO2" model init --force --out "$OUT/model.gguf" --corpus "$OUT/corpus.txt" --vocab 1024 \
		--layers 2 --hidden "$HIDDEN" --heads 2 --kv-heads 1 --ffn $((2 * HIDDEN)) --ctx "$CTX" --seed 1
}

# ---- 3. SFT warm start (shared by every arm) ------------------------------
# Full SFT: every weight of the random model is trained and OUT/sft.gguf is a
# new base model (no adapter). Every arm trains a fresh LoRA on top of it.
sft() {
	"$EMPO2" sft --force --full -m "$OUT/model.gguf" --data "$OUT/sft-train.jsonl" --val "$OUT/sft-dev.jsonl" \
		-o "$OUT/sft.gguf" --epochs "$SFT_EPOCHS" --lr "$SFT_LR" --min-lr "$SFT_MIN_LR" --warmup 10 \
		--batch-tokens 2048 --no-pack --max-len "$SFT_MAXLEN" --micro-tokens $((2 * SFT_MAXLEN)) \
		--threads "$THREADS" --seed 1 --resume --json 2>&1 >"$OUT/sft-epochs.jsonl" | tee "$OUT/sft.log" >&2
	# a record cut at --max-len would train on a truncated episode: refuse
	if grep -q 'truncated=[1-9]' "$OUT/sft.log"; then
		die "SFT records were truncated at SFT_MAXLEN=$SFT_MAXLEN tokens (see sft.log): raise it"
	fi
}

# ---- 3a. the reading stage (READ_SFT_EPOCHS > 0; gate runs 2 and 3) ---------
# A second full SFT of the warm start on the RL family's demos and their
# memory-reading records only: the first stage's model becomes
# OUT/sft-stage1.gguf and the result OUT/sft.gguf.
readsft() {
	((READ_SFT_EPOCHS > 0)) || return 0
	"$EMPO2" env demos textlab --force --tasks "$RL_TASK" --split train --skip-variations "$RL_SFT_FROM" --variations "$READ_SFT_VARS" \
		--kind explore "${SIMP[@]}" --key "$KEY" --threshold "$THRESHOLD" --top-k "$TOP_K" --tips-in "$SFT_TIPS_IN" \
		--read-records "$READ_SFT_RECORDS" --tip-failures 4 -o "$OUT/read-train.jsonl"
	local low
	low=$(grep -o '"variation":[0-9]*' "$OUT/read-train.jsonl" | cut -d: -f2 | sort -n | head -1)
	((low >= POOL)) || die "read-train.jsonl holds pool variation $low (< POOL=$POOL)"
	[[ -f "$OUT/sft-stage1.gguf" ]] || mv "$OUT/sft.gguf" "$OUT/sft-stage1.gguf"
	# the first stage's training state goes with its model: the reading
	# stage's sft --resume would take it for its own (written with the first
	# stage's seed). No sft.gguf yet means no reading-stage checkpoint yet
	# (sft writes both at every checkpoint), so a state left is the first
	# stage's.
	if [[ ! -f "$OUT/sft.gguf" && -f "$OUT/sft.state.gguf" && ! -f "$OUT/sft-stage1.state.gguf" ]]; then
		mv "$OUT/sft.state.gguf" "$OUT/sft-stage1.state.gguf"
	fi
	"$EMPO2" sft --force --full -m "$OUT/sft-stage1.gguf" --data "$OUT/read-train.jsonl" --val "$OUT/rl-dev.jsonl" \
		-o "$OUT/sft.gguf" --epochs "$READ_SFT_EPOCHS" --lr 1e-3 --min-lr 1e-4 --warmup 5 \
		--batch-tokens 2048 --no-pack --max-len "$SFT_MAXLEN" --micro-tokens $((2 * SFT_MAXLEN)) \
		--threads "$THREADS" --seed 2 --resume --json 2>&1 >"$OUT/readsft-epochs.jsonl" | tee "$OUT/readsft.log" >&2
	if grep -q 'truncated=[1-9]' "$OUT/readsft.log"; then
		die "reading-stage records were truncated at SFT_MAXLEN=$SFT_MAXLEN tokens (see readsft.log): raise it"
	fi
}

# ---- 4/6. evaluation of one policy ---------------------------------------
# evaluate DIR THREADS ARGS…: ARGS name the policy (--run R | --model M);
# the JSON results go to DIR/eval/*.json.
evaluate() {
	local dir=$1 threads=$2
	shift 2
	local common=(--force --env textlab "${SIMP[@]}" --temperature "$EVAL_TEMP" --seed 1 --threads "$threads"
		--ctx "$CTX" --threshold "$THRESHOLD" --top-k "$TOP_K" --set "memory.tips_in=$TIPS_IN" --set "memory.key=$KEY" --tip-temperature "$TIP_TEMP" "$@")
	local rl=("${common[@]}" "${LIMIT[@]}") # the RL family at the runs' episode length; boil/freeze at their own
	local memboth=(--memory off)
	[[ "$*" == *--run* ]] && memboth=(--memory both)
	mkdir -p "$dir/eval"
	# held-out variations of the RL family, memory off (the paper's main claim)
	# shellcheck disable=SC2046
	"$EMPO2" eval "${rl[@]}" --tasks "$RL_TASK" --split test --memory off $(vars_flag "$TEST_VARS") --episodes "$HELDOUT_EPISODES" \
		-o "$dir/eval/test-off.json" || return 1
	# the training pool, memory off and (for runs) on with the run's memory
	"$EMPO2" eval "${rl[@]}" --tasks "$RL_TASK" --split train --variations "$POOL" "${memboth[@]}" \
		-o "$dir/eval/pool.json" || return 1
	# adaptation on held-out variations: K trials, fresh memory vs control
	# shellcheck disable=SC2046
	"$EMPO2" eval "${rl[@]}" --ood --tasks "$RL_TASK" --split test $(vars_flag "$OOD_RL_VARS") \
		--trials "$TRIALS" -o "$dir/eval/ood-rl-test.json" || return 1
	# OOD families boil and freeze (the held-out tasks)
	# shellcheck disable=SC2046
	"$EMPO2" eval "${common[@]}" --ood --split test $(vars_flag "$OOD_VARS") --trials "$TRIALS" \
		-o "$dir/eval/ood-heldout.json" || return 1
}

# The warm start is the SFT base model itself, no adapter (step 0 of every
# arm: a fresh LoRA starts with B = 0).
warmstart() {
	evaluate "$OUT/warmstart" "$THREADS" --model "$OUT/sft.gguf"
	# sanity check: the warm start on its own SFT families (held-out variations)
	"$EMPO2" eval --force --env textlab "${SIMP[@]}" --temperature "$EVAL_TEMP" --seed 1 --threads "$THREADS" \
		--ctx "$CTX" --model "$OUT/sft.gguf" --tasks "$SFT_TASKS" \
		--split test --variations "$SKILL_VARS" --memory off -o "$OUT/warmstart/eval/sft-families-test-off.json"
}

# ---- 4a. the pre-registered gate (docs/experiment.md, Study 3) -------------
# Can the warm start use its memory? Per evaluation seed, adaptation trials
# on the training pool (a fresh memory per variation filled by the
# policy's own earlier trials, a tip after each, no weight update) and on
# held-out variations, each against the same trials without memory;
# scripts/exptable -gate computes the verdict into OUT/gate.md.
gate() {
	mkdir -p "$OUT/gate"
	local s
	for s in $GATE_SEEDS; do
		local common=(--force --env textlab "${SIMP[@]}" --temperature "$EVAL_TEMP" --seed "$s" --threads "$THREADS"
			--ctx "$CTX" --threshold "$THRESHOLD" --top-k "$TOP_K" --set "memory.tips_in=$TIPS_IN" --set "memory.key=$KEY"
			--tip-temperature "$TIP_TEMP" "${LIMIT[@]}" --model "$OUT/sft.gguf" --tasks "$RL_TASK" --ood --trials "$GATE_TRIALS")
		[[ -f "$OUT/gate/pool-s$s.json" ]] ||
			"$EMPO2" eval "${common[@]}" --split train --variations "$GATE_POOL" -o "$OUT/gate/pool-s$s.json.tmp" \
				--episodes-out "$OUT/gate/pool-s$s.jsonl" >>"$OUT/gate/eval.log" 2>&1 ||
			die "gate: eval on the pool (seed $s) failed: see $OUT/gate/eval.log"
		[[ -f "$OUT/gate/pool-s$s.json" ]] || mv "$OUT/gate/pool-s$s.json.tmp" "$OUT/gate/pool-s$s.json"
		[[ -f "$OUT/gate/heldout-s$s.json" ]] ||
			"$EMPO2" eval "${common[@]}" --split test --variations "$GATE_HELDOUT" -o "$OUT/gate/heldout-s$s.json.tmp" \
				--episodes-out "$OUT/gate/heldout-s$s.jsonl" >>"$OUT/gate/eval.log" 2>&1 ||
			die "gate: eval on held-out variations (seed $s) failed: see $OUT/gate/eval.log"
		[[ -f "$OUT/gate/heldout-s$s.json" ]] || mv "$OUT/gate/heldout-s$s.json.tmp" "$OUT/gate/heldout-s$s.json"
		log "gate: seed $s evaluated"
	done
	"$GO" build -o "$OUT/exptable" ./scripts/exptable
	"$OUT/exptable" -gate "$OUT/gate" >"$OUT/gate.md"
	# does the policy read its memory? (the episodes the gate played; reading.go)
	local eps=("$OUT"/gate/*-s*.jsonl)
	[[ ! -f "${eps[0]}" ]] || "$OUT/exptable" -reading "${eps[@]}" >"$OUT/gate-reading.md"
	cat "$OUT/gate.md" >&2
}

# gate_verdict: stops the study when the gate failed (GATE_ENFORCE=1).
gate_verdict() {
	local v
	v=$(tail -1 "$OUT/gate.md")
	log "$v"
	if [[ "$v" != "gate: PASS" && "$GATE_ENFORCE" == 1 ]]; then
		die "the gate failed ($OUT/gate.md): the study does not run on a policy that cannot use its memory (docs/experiment.md, Study 3; GATE_ENFORCE=0 runs it anyway)"
	fi
}

# ---- 5. one trained run, then its evaluation -------------------------------
arm_flags() {
	case "$1" in
	grpo) echo "--preset grpo" ;;
	empo2) echo "--preset empo2" ;;
	memory-only) echo "--preset memory-only" ;;
	empo2-paper) echo "--preset empo2 --set mode.memory_prob=0.5 --set mode.offpolicy_prob=0.3333" ;;
	oracle) echo "--preset empo2 --set rollout.oracle_tips=true" ;; # the authors' p, q; tips = the environment's true tips
	*) return 1 ;;
	esac
}

run_one() {
	local arm=$1 seed=$2
	local dir="$OUT/runs/$arm-s$seed"
	local flags
	flags=$(arm_flags "$arm")
	mkdir -p "$OUT/runs"
	if [[ ! -f "$dir/.trained" ]]; then
		if [[ -f "$dir/run.json" ]]; then
			# an interrupted run (RESUME=1): continue from its checkpoint and config.yaml
			"$EMPO2" train --run-dir "$dir" --resume --steps "$STEPS" --threads 1 >>"$dir/train.log" 2>&1 || return 1
		else
			# a fresh LoRA (B = 0) on the SFT base: step 0 is the warm start exactly.
			# A new run needs a missing or empty directory: its log waits beside it
			# and moves in once the run exists.
			# shellcheck disable=SC2086
			"$EMPO2" train $flags --model "$OUT/sft.gguf" --env textlab --tasks "$(pool_tasks)" \
				--steps "$STEPS" --seed "$seed" --threads 1 --run-dir "$dir" \
				--set "lora.rank=$RANK" --set "lora.alpha=$((2 * RANK))" --set "memory.top_k=$TOP_K" \
				--set "batch.tasks=$BATCH_TASKS" --set "batch.rollouts=$BATCH_ROLLOUTS" \
				--set "context=$CTX" --set env_options.simplifications=easy \
				--set "memory.threshold=$THRESHOLD" --set "memory.tips_in=$TIPS_IN" --set "memory.key=$KEY" --set "update.lr=$RL_LR" \
				--set "update.mini_batches=$MINI_BATCHES" --set "update.ppo_epochs=$PPO_EPOCHS" --set "update.micro_batch=$MICRO_BATCH" \
				--set "update.old_logp=$OLD_LOGP" --set "rollout.tip_temperature=$TIP_TEMP" \
				--set "env_options.step_limit=$STEP_LIMIT" >>"$dir.train.log" 2>&1 || return 1
			cat "$dir.train.log" >>"$dir/train.log" && rm "$dir.train.log"
		fi
		touch "$dir/.trained"
	fi
	if [[ ! -f "$dir/.evaluated" ]]; then
		# the run's model is the SFT base and its latest checkpoint the LoRA;
		# memory-only's checkpoints hold the untouched B = 0 adapter (= the base),
		# and a run with no checkpoint at all is evaluated as the base
		# (empo2 eval --run does so)
		evaluate "$dir" 1 --run "$dir" >>"$dir/eval.log" 2>&1 || return 1
		if [[ -f "$dir/memory.db" ]]; then
			"$EMPO2" memory export --force --db "$dir/memory.db" --out "$dir/memory.jsonl" >>"$dir/eval.log" 2>&1 || return 1
		fi
		touch "$dir/.evaluated"
	fi
}

runs() {
	local arm seed
	for arm in $ARMS; do arm_flags "$arm" >/dev/null || die "unknown arm '$arm' (have grpo, empo2, memory-only, empo2-paper, oracle)"; done
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
		die "failed runs: $(tr '\n' ' ' <"$OUT/.failed")(see their train.log / eval.log; runs/NAME.train.log for a run that did not start)"
	fi
}

# ---- 7. report and table ---------------------------------------------------
report() {
	local dirs=("$OUT"/runs/*/ "$OUT/warmstart")
	"$EMPO2" report --force "${dirs[@]%/}" --out "$OUT/report" --title "EMPO² vs GRPO on textlab ($MODE)"
}

table() {
	"$GO" build -o "$OUT/exptable" ./scripts/exptable
	"$OUT/exptable" -out "$OUT" -diagnosis "$OUT/diagnosis.md" >"$OUT/table.md"
}

# ---- 1-3 instead: a given warm start (WARM) ---------------------------------
warm() { # WARM was checked at the start
	cp "$WARM" "$OUT/sft.gguf"
	{
		echo "warm start: $WARM"
		sha256sum "$OUT/sft.gguf"
	} >"$OUT/warm.txt"
}

# ---- 1-3 instead: the probe chain (RECIPE=chain, make experiment's default) ---
# OUT/base: the fresh model and the other families' demos exactly as the
# chain's base was built (the gate mode's demos at threshold 0.95, the
# setting of its day); OUT/chain: the chain's stages (scripts/probe-scratch.sh
# chain, which skips finished ones); its s17.gguf becomes OUT/sft.gguf.
chain() {
	local keep=(PATH="$PATH" HOME="$HOME" TMPDIR="${TMPDIR:-/tmp}" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}")
	env -i "${keep[@]}" EMPO2="$EMPO2" GO="$GO" OUT="$OUT/base" UNTIL=model RESUME=1 THRESHOLD=0.95 scripts/experiment.sh gate
	env -i "${keep[@]}" P="$OUT/chain" B="$OUT/base" E="$EMPO2" scripts/probe-scratch.sh chain
	cp "$OUT/chain/s17.gguf" "$OUT/sft.gguf"
	{
		echo "warm start: the probe chain (RECIPE=chain; scripts/probe-scratch.sh chain), stage seconds in chain/chain-timing.tsv"
		sha256sum "$OUT/base/model.gguf" "$OUT"/chain/s{1,6,7,8,9,10,17}.gguf "$OUT/sft.gguf"
	} >"$OUT/warm.txt"
}

if [[ -n "$WARM" ]]; then
	stage warm warm
elif [[ "$RECIPE" == chain ]]; then
	stage chain chain
else
	stage demos demos
	stage model model
	stage sft sft
	stage readsft readsft
fi
stage gate gate
gate_verdict
stage warmstart warmstart
stage runs runs
stage report report
stage table table
# the wall time of this invocation (a RESUME=1 that had nothing left to do adds no line)
[[ -z "${RAN:-}" ]] || printf 'total\t%d\n' $(($(date +%s) - T0)) >>"$OUT/timing.tsv"
cat "$OUT/table.md"
log "finished in $(($(date +%s) - T0)) s: $OUT/table.md, $OUT/diagnosis.md, $OUT/report/report.html"
