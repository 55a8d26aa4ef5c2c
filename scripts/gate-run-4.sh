#!/usr/bin/env bash
# gate run 4 (docs/experiment.md, "Gate run 4"; results.md), as it ran with commit
# 8627f03's binary copied to build/empo2-gate4 and gate run 3's model.gguf,
# sft.gguf (its final policy) and rl-dev.jsonl copied into build/experiment-gate4
set -euo pipefail
G=build/experiment-gate4
E=build/empo2-gate4
T0=$(date +%s)
t() { echo "$1	$(( $(date +%s) - T0 ))" >> $G/timing.tsv; T0=$(date +%s); }
SIMP=(--simplifications easy)
TASKS=$(seq -s, -f 'find-living-thing/%g' 8 23)
[[ -f $G/own/.done ]] || {
  rm -rf $G/own
  $E train --preset memory-only --model $G/sft.gguf --env textlab --tasks "$TASKS" --steps 3 --seed 1 --threads 2 --run-dir $G/own \
    --set batch.tasks=16 --set batch.rollouts=4 --set context=4096 --set env_options.simplifications=easy \
    --set memory.key=observation --set memory.threshold=0.95 --set memory.top_k=3 --set memory.tips_in=last-turn \
    --set rollout.temperature=0.4 --set rollout.tip_temperature=0 > $G/own.log 2>&1
  touch $G/own/.done; t own
}
[[ -f $G/read-own.jsonl ]] || {
  $E env demos textlab --force --tasks find-living-thing --split train --skip-variations 8 --variations 16 --kind explore "${SIMP[@]}" \
    --key observation --threshold 0.95 --top-k 3 --tips-in last-turn --read-records 24 --read-memory $G/own/memory.db \
    -o $G/read-own.jsonl > $G/demos.log 2>&1; t records
}
[[ -f $G/.done-readsft ]] || {
  [[ -f $G/sft-stage2.gguf ]] || mv $G/sft.gguf $G/sft-stage2.gguf
  $E sft --force --full -m $G/sft-stage2.gguf --data $G/read-own.jsonl --val $G/rl-dev.jsonl -o $G/sft.gguf --epochs 2 --lr 1e-3 --min-lr 1e-4 --warmup 5 \
    --batch-tokens 2048 --no-pack --max-len 2048 --micro-tokens 4096 --threads 2 --seed 3 --resume --json 2>&1 >$G/readsft-epochs.jsonl | tee $G/readsft.log >&2
  grep -q 'truncated=[1-9]' $G/readsft.log && { echo "records truncated" >&2; exit 1; }
  touch $G/.done-readsft; t readsft
}
mkdir -p $G/gate
for s in 1 2 3; do
  common=(--force --env textlab "${SIMP[@]}" --temperature 0.4 --seed "$s" --threads 2 --ctx 4096 --model $G/sft.gguf --tasks find-living-thing
    --ood --trials 3 --threshold 0.95 --top-k 3 --set memory.tips_in=last-turn --set memory.key=observation --tip-temperature 0)
  [[ -f $G/gate/pool-s$s.json ]] || $E eval "${common[@]}" --split train --variations 8 -o $G/gate/pool-s$s.json >>$G/gate/eval.log 2>&1
  [[ -f $G/gate/heldout-s$s.json ]] || $E eval "${common[@]}" --split test --variations 4 -o $G/gate/heldout-s$s.json >>$G/gate/eval.log 2>&1
done
t gate
go build -o $G/exptable ./scripts/exptable
$G/exptable -gate $G/gate > $G/gate.md
cat $G/gate.md
