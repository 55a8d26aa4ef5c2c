#!/usr/bin/env bash
# The gate (issue 36; docs/experiment.md, "The gate") on a probe policy that
# is not `make experiment`'s warm start: the gate's procedure, seeds, sizes
# and rule, unchanged (the same eval arguments as scripts/experiment.sh's
# gate stage at its Study 3 defaults). Gate run 5 (build/probe/fix4.gguf)
# and gate run 6 (build/probe/rf5.gguf) ran this, each registered first.
#   scripts/gate-probe.sh MODEL OUT
# Those policies were taught on entries with the score before the action, so
# the gate runs in a worktree with scripts/probe-score-first.patch applied
# (its binary and its exptable), as the probes do (probe-reading.sh's
# header): cd /tmp/sf && make && scripts/gate-probe.sh build/probe/fix4.gguf build/experiment-gate5
# A policy taught on the tree's own entries (tip first: the fourth and fifth
# rounds' build/p7 models) runs in this tree with TIP_FIRST=1. STEP_LIMIT=N
# plays N-step episodes and THRESHOLD=T retrieves at cosine T instead of 0.95
# (changes of the gate's setting: registered first).
# Writes OUT: gate/{pool,heldout}-sS.{json,jsonl}, gate.md (the verdict,
# scripts/exptable -gate), gate-reading.md, timing.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
E=${EMPO2:-bin/empo2}
M=${1:?usage: scripts/gate-probe.sh MODEL OUT}
G=${2:?usage: scripts/gate-probe.sh MODEL OUT}
[[ ${TIP_FIRST:-0} == 1 ]] || grep -q 'The episode ended with score %s/100; at this step' trainer/rollout/tips.go ||
	{ echo "gate-probe.sh: run it in a tree with scripts/probe-score-first.patch applied (see the header), or TIP_FIRST=1 for a policy taught on the tree's own entries" >&2 && exit 2; }
export TMPDIR=${TMPDIR:-$PWD/.tmp} CGO_CFLAGS=${CGO_CFLAGS:--O3 -march=native} CGO_CXXFLAGS=${CGO_CXXFLAGS:--O3 -march=native}
mkdir -p "$TMPDIR" "$G/gate"
T0=$(date +%s)
for s in 1 2 3; do
	common=(--force --env textlab --simplifications easy --temperature 0.4 --seed "$s" --threads 2 --ctx 4096 --model "$M"
		--tasks find-living-thing --ood --trials 3 --threshold "${THRESHOLD:-0.95}" --top-k 3 --set memory.tips_in=last-turn
		--set memory.key=observation --tip-temperature 0 ${STEP_LIMIT:+--step-limit "$STEP_LIMIT"})
	"$E" eval "${common[@]}" --split train --variations 8 -o "$G/gate/pool-s$s.json" --episodes-out "$G/gate/pool-s$s.jsonl" >>"$G/gate/eval.log" 2>&1
	"$E" eval "${common[@]}" --split test --variations 4 -o "$G/gate/heldout-s$s.json" --episodes-out "$G/gate/heldout-s$s.jsonl" >>"$G/gate/eval.log" 2>&1
done
echo "gate: $(($(date +%s) - T0)) s" >"$G/timing.txt"
go build -o "$G/exptable" ./scripts/exptable
"$G/exptable" -gate "$G/gate" >"$G/gate.md"
"$G/exptable" -reading "$G"/gate/*.jsonl >"$G/gate-reading.md" || true
cat "$G/gate.md" "$G/gate-reading.md" "$G/timing.txt"
