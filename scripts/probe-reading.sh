#!/usr/bin/env bash
# Probes after gate run 4 (issue 36; docs/results.md, "Does the policy read
# its memory?"): NOT pre-registered, dev split only — they choose what the
# next registered gate run should change; none is a gate run. Each probe
# fine-tunes a warm start of the gate runs on memory-reading records, then
# plays the gate's adaptation trials on 8 dev variations of
# find-living-thing (seed 1; the gate's memory settings) and counts how
# often the policy takes the action its block says a successful attempt
# took (scripts/exptable -reading).
#
#   scripts/probe-reading.sh NAME   # NAME: base g3 e8 rand3 mix2 mix3 mix5 w96 (w96 after mix3: its data)
#
# Needs gate run 3's artefacts in build/experiment and gate run 4's in
# build/experiment-gate4. Writes build/probe/NAME*.
set -euo pipefail
cd "$(dirname "$0")/.."
E=${EMPO2:-bin/empo2}
P=build/probe
G3=build/experiment
G4=build/experiment-gate4
mkdir -p "$P"
MEM=(--key observation --threshold 0.95 --top-k 3 --tips-in last-turn)
# rand SEED RECORDS OUT: memory-reading records (read-all only: the block
# holds the demo, score 100, and attempts deviating from it) on random-tour
# explore demos of find-living-thing train variations 8… (outside the pool)
rand() {
	"$E" env demos textlab --force --tasks find-living-thing --split train --skip-variations 8 ${4:+--variations $4} --kind explore --tour random \
		--seed "$1" --simplifications easy "${MEM[@]}" --read-records "$2" -o "$P/rs.tmp.jsonl" >/dev/null
	grep '"memory":"read-all"' "$P/rs.tmp.jsonl" >"$3"
	rm "$P/rs.tmp.jsonl"
}
doors() { "$E" env demos textlab --force --tasks find-living-thing --split train --skip-variations 8 --kind explore --simplifications easy -o "$1" >/dev/null; }
sft() { # sft FROM DATA OUT EPOCHS
	"$E" sft --force --full -m "$1" --data "$2" --val "$G3/rl-dev.jsonl" -o "$3" --epochs "$4" --lr 1e-3 --min-lr 1e-4 --warmup 5 \
		--batch-tokens 2048 --no-pack --max-len 2048 --micro-tokens 4096 --threads 2 --seed 3 --json >"${3%.gguf}-epochs.jsonl" 2>"${3%.gguf}.log"
}
name=${1:?usage: scripts/probe-reading.sh NAME}
model=$P/$name.gguf
case $name in
base) model=$G4/sft.gguf ;; # gate run 4's final warm start
g3) model=$G3/sft.gguf ;;   # gate run 3's final warm start
e8) sft "$G4/sft-stage2.gguf" "$G4/read-own.jsonl" "$model" 8 ;; # gate run 4's reading stage, 8 epochs instead of 2
rand3) rand 0 24 "$P/rand.jsonl" && sft "$G4/sft.gguf" "$P/rand.jsonl" "$model" 3 ;;
mix2) rand 0 24 "$P/rand32.jsonl" 32 && doors "$P/doors64.jsonl" &&
	cat "$P/rand32.jsonl" "$P/doors64.jsonl" | shuf --random-source=<(yes) >"$P/mix2.jsonl" && sft "$G3/sft.gguf" "$P/mix2.jsonl" "$model" 3 ;;
mix3 | mix5)
	n=4 epochs=4
	[[ $name == mix5 ]] && n=8 epochs=6
	: >"$P/$name-read.jsonl"
	for s in $(seq 1 $n); do rand "$s" 3 "$P/r.jsonl" && cat "$P/r.jsonl" >>"$P/$name-read.jsonl"; done
	rm -f "$P/r.jsonl"
	doors "$P/doors64.jsonl"
	cat "$P/$name-read.jsonl" "$P/doors64.jsonl" | shuf --random-source=<(yes) >"$P/$name.jsonl"
	sft "$G3/sft.gguf" "$P/$name.jsonl" "$model" "$epochs" ;;
w96) # a wider model with a KV head per head, from scratch on mix3's records
	# (find-living-thing only): can more capacity learn to read?
	"$E" model init --force --out "$P/w96-init.gguf" --corpus "$G3/corpus.txt" --vocab 1024 --layers 2 --hidden 96 --heads 4 --kv-heads 4 \
		--ffn 192 --ctx 4096 --seed 1 >/dev/null
	"$E" sft --force --full -m "$P/w96-init.gguf" --data "$P/mix3.jsonl" --val "$G3/rl-dev.jsonl" -o "$model" --epochs 12 --lr 3e-3 --min-lr 2e-4 \
		--warmup 10 --batch-tokens 2048 --no-pack --max-len 2048 --micro-tokens 4096 --threads 2 --seed 1 --json >"$P/w96-epochs.jsonl" 2>"$P/w96.log" ;;
*) echo "unknown probe $name" >&2 && exit 2 ;;
esac
"$E" eval --force --env textlab --simplifications easy --temperature 0.4 --seed 1 --threads 2 --ctx 4096 --model "$model" \
	--tasks find-living-thing --ood --trials 3 --threshold 0.95 --top-k 3 --set memory.tips_in=last-turn --set memory.key=observation \
	--tip-temperature 0 --split dev --variations 8 -o "$P/$name-dev.json" --episodes-out "$P/$name-dev.jsonl" >"$P/$name-dev.log" 2>&1
go build -o "$P/exptable" ./scripts/exptable
"$P/exptable" -reading "$P/$name-dev.jsonl"
