#!/usr/bin/env bash
# Gate run 5 (issue 36; docs/experiment.md, "Gate run 5", registered before
# it ran): the gate's procedure, seeds, sizes and rule, unchanged, on the
# probe policy build/probe/fix4.gguf (scripts/probe-reading.sh … fix4).
# That policy was taught on entries with the score before the action, so
# the gate runs in a worktree with scripts/probe-score-first.patch applied
# (its binary and its exptable), as the probes did (probe-reading.sh's
# header): cd /tmp/sf && make && scripts/gate-run5.sh
# Writes build/experiment-gate5: gate/{pool,heldout}-sS.{json,jsonl},
# gate.md (the verdict, scripts/exptable -gate), gate-reading.md.
set -euo pipefail
cd "$(dirname "$0")/.."
E=${EMPO2:-bin/empo2}
grep -q 'The episode ended with score %s/100; at this step' trainer/rollout/tips.go ||
	{ echo "gate-run5.sh: run it in a tree with scripts/probe-score-first.patch applied (see the header)" >&2 && exit 2; }
G=build/experiment-gate5
M=build/probe/fix4.gguf
export TMPDIR=${TMPDIR:-$PWD/.tmp} CGO_CFLAGS=${CGO_CFLAGS:--O3 -march=native} CGO_CXXFLAGS=${CGO_CXXFLAGS:--O3 -march=native}
mkdir -p "$TMPDIR" "$G/gate"
T0=$(date +%s)
for s in 1 2 3; do
	common=(--force --env textlab --simplifications easy --temperature 0.4 --seed "$s" --threads 2 --ctx 4096 --model "$M"
		--tasks find-living-thing --ood --trials 3 --threshold 0.95 --top-k 3 --set memory.tips_in=last-turn
		--set memory.key=observation --tip-temperature 0)
	"$E" eval "${common[@]}" --split train --variations 8 -o "$G/gate/pool-s$s.json" --episodes-out "$G/gate/pool-s$s.jsonl" >>"$G/gate/eval.log" 2>&1
	"$E" eval "${common[@]}" --split test --variations 4 -o "$G/gate/heldout-s$s.json" --episodes-out "$G/gate/heldout-s$s.jsonl" >>"$G/gate/eval.log" 2>&1
done
echo "gate: $(($(date +%s) - T0)) s" >"$G/timing.txt"
go build -o "$G/exptable" ./scripts/exptable
"$G/exptable" -gate "$G/gate" >"$G/gate.md"
"$G/exptable" -reading "$G"/gate/*.jsonl >"$G/gate-reading.md" || true
cat "$G/gate.md" "$G/gate-reading.md" "$G/timing.txt"
