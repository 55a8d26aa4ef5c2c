#!/usr/bin/env bash
# Fourth round of probes (issue 36; docs/results.md, "Fourth round"): NOT
# pre-registered, dev split only. From a fresh model (no earlier probe
# chain: that chain's artefacts are not in the tree, and make experiment
# needs a recipe that starts from scratch): random-direct tours of
# find-living-thing (env demos --tour random-direct), then memory-reading
# records, short ones (--read-short) among them. Each case writes
# build/p7/NAME.gguf; `ev MODEL NAME` plays the gate's adaptation trials on
# 8 dev variations (seed 1, the gate's memory settings) and prints
# scripts/exptable -reading's row (EXTRA adds eval flags, e.g.
# EXTRA="--set rollout.oracle_tips=true").
#
#   OUT=build/g7base UNTIL=model scripts/experiment.sh gate   # the corpus, the fresh model, the other families' demos
#   scripts/probe-scratch.sh data1 && scripts/probe-scratch.sh d1   # one stage, 3 epochs
#   scripts/probe-scratch.sh s1data && scripts/probe-scratch.sh s1  # plain tours only, 6 epochs (19 min)
#   scripts/probe-scratch.sh s2data && scripts/probe-scratch.sh s2  # from s1: short read records of every kind, 2 epochs
#   scripts/probe-scratch.sh s3data && scripts/probe-scratch.sh s3  # from s1: short read-all room choices, 2 epochs
#   s4: s3 with the score before the action (scripts/probe-score-first.patch):
#     git apply scripts/probe-score-first.patch && go build -o bin/empo2-sf ./cmd/empo2 && git apply -R scripts/probe-score-first.patch
#     E=bin/empo2-sf SUF=sf scripts/probe-scratch.sh s3data && E=bin/empo2-sf scripts/probe-scratch.sh s4
#     E=bin/empo2-sf scripts/probe-scratch.sh ev build/p7/s4.gguf s4
#   scripts/probe-scratch.sh s5data && FROM=s3 scripts/probe-scratch.sh s5   # a denser copy signal, 1 epoch
#   scripts/probe-scratch.sh ev build/p7/s2.gguf s2
# Fifth round (docs/results.md, "Fifth round"): tips the policy cannot trust
# (--read-wrong-tips 0.5: half the stored episodes show another episode's
# tip) and a copy signal of about twice s5's volume, from s1:
#   scripts/probe-scratch.sh s6data && scripts/probe-scratch.sh s6
#   scripts/probe-scratch.sh s7data && scripts/probe-scratch.sh s7   # from s6: short read records of every step kind
#   scripts/probe-scratch.sh s8data && scripts/probe-scratch.sh s8   # from s7: read records from its own memory, not room choices
#   EXTRA="--step-limit 15" scripts/probe-scratch.sh ev build/p7/s8.gguf s8l15   # 15-step episodes
#   scripts/probe-scratch.sh s9data && scripts/probe-scratch.sh s9   # from s8: copy records under its own tips (probe-owncopy.jq)
#   scripts/probe-scratch.sh s10data && scripts/probe-scratch.sh s10 # from s9: go to the room a successful tip names (probe-tipdirect.jq)
#   scripts/probe-scratch.sh s11data && scripts/probe-scratch.sh s11 # from s10: focus at that room's listing
#   scripts/probe-scratch.sh s12data && scripts/probe-scratch.sh s12 # s11 at lr 3e-4, the focus records once
# Sixth round (docs/experiment.md): from s10, its own memory, the focus records once more, tip-writing tours kept
#   scripts/probe-scratch.sh s13data && scripts/probe-scratch.sh s13
#   for l in 30 15; do for s in 1 2 3; do EXTRA="--step-limit $l --seed $s" scripts/probe-scratch.sh ev build/p7/s13.gguf s13l${l}s$s; done; done
#   scripts/probe-scratch.sh s14data && scripts/probe-scratch.sh s14   # from s13: failed attempts' blocks (own memory at 15 steps, probe-avoid.jq)
#   scripts/probe-scratch.sh s15data && scripts/probe-scratch.sh s15   # from s14 at threshold 0.99: + probe-explore.jq
#   scripts/probe-scratch.sh s16data && scripts/probe-scratch.sh s16   # from s13: true tips after failed 15-step attempts (--attempt-tips)
#   scripts/probe-scratch.sh s17data && scripts/probe-scratch.sh s17   # from s10: s13 and s16 in one stage
#   EXTRA="--variations 36 --threshold 0.99 --step-limit 15 --seed 1" scripts/probe-scratch.sh ev build/p7/s15.gguf NAME   # all 36 dev variations
# make experiment's warm start (docs/experiment.md, "Gate run 10"): the stages s17 needs, in order, from B's fresh model
#   P=OUT/chain B=OUT/base scripts/probe-scratch.sh chain   # base s1data s1 s6data s6 … s10 s13data s17parts s17data s17
# Seventh round (docs/experiment.md, "Condensing the chain"): s1 → c2 → c3, three SFT stages instead of ten
#   scripts/probe-scratch.sh c2data && scripts/probe-scratch.sh c2   # from s1: s6's, s7's and s10's code-written records in one epoch
#   scripts/probe-scratch.sh c3data && scripts/probe-scratch.sh c3   # from c2: s17's recipe on c2's own memory
set -euo pipefail
SELF=$(realpath "$0")
cd "$(dirname "$SELF")/.."
E=${E:-bin/empo2}
P=${P:-build/p7}     # where the stages write (make experiment's chain: OUT/chain)
B=${B:-build/g7base} # the fresh model and the other families' demos (THRESHOLD=0.95 OUT=B UNTIL=model scripts/experiment.sh gate)
SUF=${SUF:-}
mkdir -p "$P"
export TMPDIR=${TMPDIR:-$PWD/.tmp} CGO_CFLAGS=${CGO_CFLAGS:--O3 -march=native} CGO_CXXFLAGS=${CGO_CXXFLAGS:--O3 -march=native}
mkdir -p "$TMPDIR"
MEM=(--key observation --threshold "${TH:-0.95}" --top-k 3 --tips-in last-turn)
ROOM='"content":"teleport to [^"]*"}\]'
# rtour SEED N OUT: random-direct tours of find-living-thing train
# variations 8… (seed SEED), each with N read records from one- or
# two-episode memories (N 0: the plain demos only)
rtour() {
	local read=()
	(($2 == 0)) || read=("${MEM[@]}" --read-records "$2" --read-trials 2 --tip-failures 4 --read-wrong-tips "${WRONG:-0}")
	"$E" env demos textlab --force --tasks find-living-thing --split train --skip-variations 8 --kind explore --tour random-direct \
		--seed "$1" --simplifications easy "${read[@]}" -o "$3" >/dev/null
}
# shortread SEED OUT: the short read records (12 per demo) of seed SEED (WRONG: --read-wrong-tips, default 0)
shortread() {
	"$E" env demos textlab --force --tasks find-living-thing --split train --skip-variations 8 --kind explore --tour random-direct \
		--seed "$1" --simplifications easy "${MEM[@]}" --read-records 12 --read-trials 2 --tip-failures 4 --read-short \
		--read-wrong-tips "${WRONG:-0}" -o "$2" >/dev/null
}
# shortall FIRST LAST OUT [JQ]: every short read record of seeds FIRST…LAST (all step kinds,
# read-all and read-fail), each through the jq program file JQ when given
shortall() {
	: >"$3"
	local s
	for s in $(seq "$1" "$2"); do
		shortread "$s" "$P/r.jsonl"
		if [[ -n ${4:-} ]]; then
			grep '"read":true' "$P/r.jsonl" | jq -c -f "$4" >>"$3"
		else
			grep '"read":true' "$P/r.jsonl" >>"$3"
		fi
	done
}
# shortroom FIRST LAST OUT: the read-all room-choice short records of seeds FIRST…LAST
shortroom() {
	: >"$3"
	local s
	for s in $(seq "$1" "$2"); do
		shortread "$s" "$P/r.jsonl"
		grep '"memory":"read-all"' "$P/r.jsonl" | grep "$ROOM" >>"$3" || true
	done
}
# ownmem MODEL RUN [STEP_LIMIT]: a memory-only run of build/p7/MODEL.gguf on train variations 8-71
# (4 steps of 16 tasks x 4, the gate's memory settings at threshold TH) into build/p7/RUN: its own memory
ownmem() {
	local lim=()
	[[ -z ${3:-} ]] || lim=(--set env_options.step_limit="$3")
	rm -rf "$P/$2"
	"$E" train --preset memory-only --model "$P/$1.gguf" --env textlab --tasks "$(seq -s, -f 'find-living-thing/%g' 8 71)" --steps 4 --seed 1 \
		--threads 2 --run-dir "$P/$2" --set batch.tasks=16 --set batch.rollouts=4 --set context=4096 --set env_options.simplifications=easy \
		"${lim[@]}" --set memory.key=observation --set memory.threshold="${TH:-0.95}" --set memory.top_k=3 \
		--set memory.tips_in=last-turn --set rollout.temperature=0.4 --set rollout.tip_temperature=0 >"$P/$2.log" 2>&1
}
# ownread RUN OUT FILTER SEED…: read records (24 per demo, full and short) at the demos' states of each
# SEED with blocks from build/p7/RUN's memory, each through the shell function FILTER, into build/p7/OUT
ownread() {
	local run=$1 out=$2 filter=$3 seed short
	shift 3
	: >"$P/$out"
	for seed in "$@"; do
		for short in "" --read-short; do
			"$E" env demos textlab --force --tasks find-living-thing --split train --skip-variations 8 --kind explore \
				--tour random-direct --seed "$seed" --simplifications easy "${MEM[@]}" --read-records 24 --read-memory "$P/$run/memory.db" $short \
				-o "$P/r.jsonl" >/dev/null
			grep '"read":true' "$P/r.jsonl" | "$filter" >>"$P/$out"
		done
	done
}
# the jq filters on read records (scripts/probe-*.jq), alone and chained as the probes used them
owncopy() { jq -c -f scripts/probe-owncopy.jq; }
tipdirect() { jq -c -f scripts/probe-tipdirect.jq; }
tipavoid() { tipdirect | jq -c -f scripts/probe-avoid.jq; }
filt() { tipavoid | jq -c -f scripts/probe-explore.jq; }
# failblocks IN…: the records at a room listing whose block holds no score-100 entry
failblocks() {
	cat "$@" | jq -c 'select((.messages[-2].content | startswith("This room is called"))
		and (.messages[-2].content | test("<memory>")) and (.messages[-2].content | test("ended with score 100/100") | not))'
}
# focusrecs IN…: the records at a room listing with a block answered "focus on …"
focusrecs() {
	cat "$@" | jq -c 'select((.messages[-1].content | startswith("focus on"))
		and (.messages[-2].content | startswith("This room is called")) and (.messages[-2].content | test("<memory>")))'
}
sft() { # FROM DATA OUT EPOCHS LR MINLR
	"$E" sft --force --full -m "$1" --data "$2" --val "$B/rl-dev.jsonl" -o "$3" --epochs "$4" --lr "$5" --min-lr "$6" --warmup 10 \
		--batch-tokens 2048 --no-pack --max-len 2048 --micro-tokens 4096 --threads 2 --seed 1 --json >"${3%.gguf}-epochs.jsonl" 2>"${3%.gguf}.log"
}
mix() { cat "${@:2}" | shuf --random-source=<(yes) >"$1"; }
name=${1:?usage: scripts/probe-scratch.sh NAME}
case $name in
data1) # one stage: the other families, 128 plain tours (seeds 11-12), seed 13's tours with 4 read records each, 1,000 jq-shortened room choices
	"$SELF" base
	rtour 13 4 "$P/read.jsonl"
	: >"$P/short-raw.jsonl"
	for s in $(seq 100 110); do rtour "$s" 12 "$P/r.jsonl" && { grep '"memory":"read-all"' "$P/r.jsonl" | grep "$ROOM" >>"$P/short-raw.jsonl" || true; }; done
	jq -c -f scripts/probe-shorten.jq <"$P/short-raw.jsonl" | shuf -n 1000 --random-source=<(yes) >"$P/short.jsonl"
	mix "$P/d1.jsonl" "$P"/other.jsonl "$P"/plain.jsonl "$P"/read.jsonl "$P"/short.jsonl ;;
d1) sft "$B/model.gguf" "$P/d1.jsonl" "$P/d1.gguf" 3 3e-3 3e-4 ;;
base) # data1's first part alone (what the chain from s1 on needs): the other families and the plain tours of seeds 11-12
	grep -v '"task":"find-living-thing"' "$B/sft-train.jsonl" >"$P/other.jsonl"
	: >"$P/plain.jsonl"
	for s in 11 12; do rtour "$s" 0 "$P/r.jsonl" && cat "$P/r.jsonl" >>"$P/plain.jsonl"; done ;;
s1data) # the skills: the other families and 192 plain tours (seeds 11, 12, 14); after data1
	cp "$P/plain.jsonl" "$P/plain3.jsonl"
	rtour 14 0 "$P/r.jsonl" && cat "$P/r.jsonl" >>"$P/plain3.jsonl"
	mix "$P/s1.jsonl" "$P/other.jsonl" "$P/plain3.jsonl" ;;
s1) sft "$B/model.gguf" "$P/s1.jsonl" "$P/s1.gguf" 6 3e-3 3e-4 ;;
s2data) # every short read record of seeds 100-101 (all step kinds, read-all and read-fail),
	# the read-all room choices of seeds 102-104, seed 13's full read records and tours
	shortall 100 101 "$P/short2.jsonl"
	shortroom 102 104 "$P/shortroom.jsonl"
	mix "$P/s2.jsonl" "$P/short2.jsonl" "$P/read.jsonl"
	mix "$P/s2b.jsonl" "$P/shortroom.jsonl" "$P/s2.jsonl" ;;
s2) sft "$P/s1.gguf" "$P/s2b.jsonl" "$P/s2.gguf" 2 1e-3 1e-4 ;;
s3data) # the read-all room choices of seeds 102-110 + seed 13's full read records and tours (SUF names the files)
	shortroom 102 110 "$P/sroom$SUF.jsonl"
	rtour 13 4 "$P/read$SUF.jsonl"
	mix "$P/s3$SUF.jsonl" "$P/sroom$SUF.jsonl" "$P/read$SUF.jsonl" ;;
s3) sft "$P/s1.gguf" "$P/s3.jsonl" "$P/s3.gguf" 2 1e-3 1e-4 ;;
s4) sft "$P/s1.gguf" "$P/s3sf.jsonl" "$P/s4.gguf" 2 1e-3 1e-4 ;;
s5data) # a denser copy signal: the read-all room choices of seeds 111-150 + seed 13's full read records (SUF names the files; after s3data)
	shortroom 111 150 "$P/sroom5$SUF.jsonl"
	mix "$P/s5$SUF.jsonl" "$P/sroom5$SUF.jsonl" "$P/read$SUF.jsonl" ;;
s5) sft "$P/${FROM:?FROM=s3 or s4}.gguf" "$P/s5$SUF.jsonl" "$P/s5$SUF.gguf" 1 1e-3 1e-4 ;;
s6data) # wrong tips in half the stored episodes: the read-all room choices of seeds 200-289,
	# every short read record of seeds 100-101, full read records (4 per tour) of seeds 13 and 15,
	# the plain tours of seed 17
	export WRONG=0.5
	shortroom 200 289 "$P/sroom6.jsonl"
	shortall 100 101 "$P/short6.jsonl"
	: >"$P/read6.jsonl"
	for s in 13 15; do rtour "$s" 4 "$P/r.jsonl" && cat "$P/r.jsonl" >>"$P/read6.jsonl"; done
	WRONG=0 rtour 17 0 "$P/plain6.jsonl"
	mix "$P/s6.jsonl" "$P/sroom6.jsonl" "$P/short6.jsonl" "$P/read6.jsonl" "$P/plain6.jsonl" ;;
s6) sft "$P/s1.gguf" "$P/s6.jsonl" "$P/s6.gguf" 1 1e-3 1e-4 ;;
s7data) # s6 answers a block with a teleport where its entry says "look around" or "pick up":
	# every short read record (all step kinds, read-all and read-fail) of seeds 300-319, full read
	# records of seeds 18-19, all with wrong tips at 0.5, and the plain tours of seed 20
	export WRONG=0.5
	shortall 300 319 "$P/short7.jsonl"
	: >"$P/read7.jsonl"
	for s in 18 19; do rtour "$s" 4 "$P/r.jsonl" && cat "$P/r.jsonl" >>"$P/read7.jsonl"; done
	WRONG=0 rtour 20 0 "$P/plain7.jsonl"
	mix "$P/s7.jsonl" "$P/short7.jsonl" "$P/read7.jsonl" "$P/plain7.jsonl" ;;
s7) sft "$P/s6.gguf" "$P/s7.jsonl" "$P/s7.gguf" 1 1e-3 1e-4 ;;
s8data) # s7 copies (69 %) but answers with fragments of its own tips ("move turtle to yellow box in
	# the living room"): its own memory (a memory-only run of s7 on train variations 8-39, 15-step
	# episodes, 4 steps of 16 tasks x 4), read records from it at the demos' steps that are not room
	# choices (the answer is never the tip's text), + every short read record of seeds 320-334 and
	# the full read records of seed 22 (wrong tips 0.5), + the plain tours of seed 21
	rm -rf "$P/own8"
	"$E" train --preset memory-only --model "$P/s7.gguf" --env textlab --tasks "$(seq -s, -f 'find-living-thing/%g' 8 39)" --steps 4 --seed 1 \
		--threads 2 --run-dir "$P/own8" --set batch.tasks=16 --set batch.rollouts=4 --set context=4096 --set env_options.simplifications=easy \
		--set env_options.step_limit=15 --set memory.key=observation --set memory.threshold=0.95 --set memory.top_k=3 \
		--set memory.tips_in=last-turn --set rollout.temperature=0.4 --set rollout.tip_temperature=0 >"$P/own8.log" 2>&1
	: >"$P/own8.jsonl"
	for short in "" --read-short; do
		"$E" env demos textlab --force --tasks find-living-thing --split train --skip-variations 8 --variations 32 --kind explore \
			--tour random-direct --seed 23 --simplifications easy "${MEM[@]}" --read-records 24 --read-memory "$P/own8/memory.db" $short \
			-o "$P/r.jsonl" >/dev/null
		grep '"read":true' "$P/r.jsonl" | grep -v "$ROOM" >>"$P/own8.jsonl" || true
	done
	export WRONG=0.5
	shortall 320 334 "$P/short8.jsonl"
	rtour 22 4 "$P/read8.jsonl"
	WRONG=0 rtour 21 0 "$P/plain8.jsonl"
	mix "$P/s8.jsonl" "$P/own8.jsonl" "$P/short8.jsonl" "$P/read8.jsonl" "$P/plain8.jsonl" ;;
s8) sft "$P/s7.gguf" "$P/s8.jsonl" "$P/s8.gguf" 1 1e-3 1e-4 ;;
s9data) # copying under its own tips: s8's own memory (memory-only, train variations 8-71,
	# 30-step episodes, 4 steps of 16 x 4), read records from it (full and short, demo seeds 23-25) turned
	# into copy records by scripts/probe-owncopy.jq (a room choice answered with the block's
	# last score-100 room, other steps with the demo's action), + every short read record of seeds
	# 340-349 (wrong tips 0.5), the plain tours of seed 24
	ownmem s8 own9
	ownread own9 own9.jsonl owncopy 23 24 25
	export WRONG=0.5
	shortall 340 349 "$P/short9.jsonl"
	WRONG=0 rtour 24 0 "$P/plain9.jsonl"
	mix "$P/s9.jsonl" "$P/own9.jsonl" "$P/short9.jsonl" "$P/plain9.jsonl" ;;
s9) sft "$P/s8.gguf" "$P/s9.jsonl" "$P/s9.gguf" 1 1e-3 1e-4 ;;
s10data) # reading the tip, not the walk: every short read record of seeds 400-419 (wrong tips 0.5) and
	# s9's records from s8's own memory (own9.jsonl), a room choice at a listing answered with the room
	# a score-100 entry's tip names (scripts/probe-tipdirect.jq), + the plain tours of seed 25
	export WRONG=0.5
	shortall 400 419 "$P/short10.jsonl" scripts/probe-tipdirect.jq
	jq -c -f scripts/probe-tipdirect.jq <"$P/own9.jsonl" >"$P/own10.jsonl"
	WRONG=0 rtour 25 0 "$P/plain10.jsonl"
	mix "$P/s10.jsonl" "$P/short10.jsonl" "$P/own10.jsonl" "$P/plain10.jsonl" ;;
s10) sft "$P/s9.gguf" "$P/s10.jsonl" "$P/s10.gguf" 1 1e-3 1e-4 ;;
s11data) # s10 goes to the tip's room and then teleports to it again at its listing instead of focusing:
	# s10's records answered "focus on …" at a listing with a block, three times over, + every short
	# read record of seeds 420-429 (wrong tips 0.5) through probe-tipdirect.jq, + s10's own-memory records
	export WRONG=0.5
	shortall 420 429 "$P/short11.jsonl" scripts/probe-tipdirect.jq
	focusrecs "$P/s10.jsonl" >"$P/focus11.jsonl"
	mix "$P/s11.jsonl" "$P/short11.jsonl" "$P/own10.jsonl" "$P/focus11.jsonl" "$P/focus11.jsonl" "$P/focus11.jsonl" ;;
s11) sft "$P/s10.gguf" "$P/s11.jsonl" "$P/s11.gguf" 1 1e-3 1e-4 ;;
s12data) # s11's records with the focus records once (after s11data)
	mix "$P/s12.jsonl" "$P/short11.jsonl" "$P/own10.jsonl" "$P/focus11.jsonl" ;;
s12) sft "$P/s10.gguf" "$P/s12.jsonl" "$P/s12.gguf" 1 3e-4 3e-5 ;;
s13data) # the sixth round: s10's own memory (memory-only, train variations 8-71, 30-step episodes) read at the
	# demos' states of seeds 26-28 (full and short) through probe-tipdirect.jq, every short read record of
	# seeds 430-439 (wrong tips 0.5) through it, the records at a listing answered "focus on" once more,
	# and the plain tours (tip writing) of seeds 26-27
	ownmem s10 own13
	ownread own13 own13.jsonl tipdirect 26 27 28
	export WRONG=0.5
	shortall 430 439 "$P/short13.jsonl" scripts/probe-tipdirect.jq
	focusrecs "$P/own13.jsonl" "$P/short13.jsonl" >"$P/focus13.jsonl"
	: >"$P/plain13.jsonl"
	for s in 26 27; do WRONG=0 rtour "$s" 0 "$P/r.jsonl" && cat "$P/r.jsonl" >>"$P/plain13.jsonl"; done
	mix "$P/s13.jsonl" "$P/own13.jsonl" "$P/short13.jsonl" "$P/focus13.jsonl" "$P/plain13.jsonl" ;;
s13) sft "$P/s10.gguf" "$P/s13.jsonl" "$P/s13.gguf" 1 3e-4 3e-5 ;;
s14data) # s13 reads a successful trial (100 after a success on dev) and is led astray after a failed one:
	# its own memory from 15-step episodes (memory-only, train variations 8-71: failed attempts whose tips
	# name rooms they never found the creature in) read at the demos' states of seeds 29-31 (full and
	# short), every short read record of seeds 440-449 (wrong tips 0.5), all through probe-tipdirect.jq and
	# probe-avoid.jq, the records at a listing whose block holds no score-100 entry once more, and the
	# plain tours of seeds 28-29
	ownmem s13 own14 15
	ownread own14 own14.jsonl tipavoid 29 30 31
	export WRONG=0.5
	shortall 440 449 "$P/short14raw.jsonl" scripts/probe-tipdirect.jq
	jq -c -f scripts/probe-avoid.jq <"$P/short14raw.jsonl" >"$P/short14.jsonl"
	failblocks "$P/own14.jsonl" "$P/short14.jsonl" >"$P/fail14.jsonl"
	: >"$P/plain14.jsonl"
	for s in 28 29; do WRONG=0 rtour "$s" 0 "$P/r.jsonl" && cat "$P/r.jsonl" >>"$P/plain14.jsonl"; done
	mix "$P/s14.jsonl" "$P/own14.jsonl" "$P/short14.jsonl" "$P/fail14.jsonl" "$P/plain14.jsonl" ;;
s14) sft "$P/s13.gguf" "$P/s14.jsonl" "$P/s14.gguf" 1 3e-4 3e-5 ;;
s15data) # from s14, at threshold 0.99 (TH): its own memory from 15-step episodes (memory-only, train
	# variations 8-71) read at the demos' states of seeds 32-34 (full and short), every short read record of
	# seeds 450-459 (wrong tips 0.5), all through probe-tipdirect.jq, probe-avoid.jq and probe-explore.jq
	# (a block of failed attempts answered with a room they did not look at), the records at a listing
	# whose block holds no score-100 entry once more, the plain tours of seeds 30-31
	export TH=0.99
	ownmem s14 own15 15
	ownread own15 own15.jsonl filt 32 33 34
	export WRONG=0.5
	shortall 450 459 "$P/short15raw.jsonl"
	filt <"$P/short15raw.jsonl" >"$P/short15.jsonl"
	failblocks "$P/own15.jsonl" "$P/short15.jsonl" >"$P/fail15.jsonl"
	: >"$P/plain15.jsonl"
	for s in 30 31; do WRONG=0 rtour "$s" 0 "$P/r.jsonl" && cat "$P/r.jsonl" >>"$P/plain15.jsonl"; done
	mix "$P/s15.jsonl" "$P/own15.jsonl" "$P/short15.jsonl" "$P/fail15.jsonl" "$P/plain15.jsonl" ;;
s15) sft "$P/s14.gguf" "$P/s15.jsonl" "$P/s15.gguf" 1 3e-4 3e-5 ;;
s16data) # honest tips after failures: s13 writes success-style tips after a failed episode ("focus on frog in
	# the bathroom", score 0) and then believes them. From s13, at threshold 0.99 (TH): the tip turns after
	# astray attempts of 15-step episodes with their true tips (--attempt-tips 4, seeds 35-37) and those
	# seeds' demos, s13's own memory from 15-step episodes read at the demos' states of seeds 38-39 and every
	# short read record of seeds 460-469 (wrong tips 0.5), through tipdirect, avoid and explore, the plain
	# tours of seed 40
	export TH=0.99
	"$SELF" s17parts
	ownmem s13 own16 15
	ownread own16 own16.jsonl filt 38 39
	mix "$P/s16.jsonl" "$P/attempt16.jsonl" "$P/own16.jsonl" "$P/short16.jsonl" "$P/plain16.jsonl" ;;
s16) sft "$P/s13.gguf" "$P/s16.jsonl" "$P/s16.gguf" 1 3e-4 3e-5 ;;
s17parts) # s16data's records that need no s13 model (all that s17 takes from s16): the attempt tips
	# with their demos (seeds 35-37), the short read records of seeds 460-469 through filt, the plain tours of seed 40
	: >"$P/attempt16.jsonl"
	for s in 35 36 37; do
		"$E" env demos textlab --force --tasks find-living-thing --split train --skip-variations 8 --kind explore --tour random-direct \
			--seed "$s" --simplifications easy --attempt-tips 4 --step-limit 15 -o "$P/r.jsonl" >/dev/null
		cat "$P/r.jsonl" >>"$P/attempt16.jsonl"
	done
	export WRONG=0.5
	shortall 460 469 "$P/short16raw.jsonl"
	filt <"$P/short16raw.jsonl" >"$P/short16.jsonl"
	WRONG=0 rtour 40 0 "$P/plain16.jsonl" ;;
chain) # make experiment's warm start: s17 from the fresh model B/model.gguf (fresh model → s1, s6–s10, s17),
	# every stage once (a finished stage is skipped: P/.done-STAGE), its seconds in P/chain-timing.tsv
	[[ -f "$P/chain-timing.tsv" ]] || printf 'stage\tseconds\n' >"$P/chain-timing.tsv"
	for st in base s1data s1 s6data s6 s7data s7 s8data s8 s9data s9 s10data s10 s13data s17parts s17data s17; do
		[[ ! -f "$P/.done-$st" ]] || continue
		t=$SECONDS
		"$SELF" "$st"
		printf '%s\t%d\n' "$st" $((SECONDS - t)) >>"$P/chain-timing.tsv"
		touch "$P/.done-$st"
		echo "$(date -u +%H:%M:%S)  chain: $st done ($((SECONDS - t)) s)" >&2
	done ;;
s17data) # one stage instead of two (a step towards a condensed recipe): s13's records and s16's that do not
	# come from s13's memory (the attempt tips with their demos, the short read records, the plain tours)
	mix "$P/s17.jsonl" "$P/s13.jsonl" "$P/attempt16.jsonl" "$P/short16.jsonl" "$P/plain16.jsonl" ;;
s17) sft "$P/s10.gguf" "$P/s17.jsonl" "$P/s17.gguf" 1 3e-4 3e-5 ;;
c2data) # s6, s7 and s10 in one stage (no own-memory records: s8's and s9's came from s7's and s8's memory):
	# s6's and s7's records (wrong tips 0.5, room choices, every short kind, full read records, plain tours)
	# and s10's short read records through probe-tipdirect.jq with its plain tours
	mix "$P/c2.jsonl" "$P/s6.jsonl" "$P/s7.jsonl" "$P/short10.jsonl" "$P/plain10.jsonl" ;;
c2) sft "$P/s1.gguf" "$P/c2.jsonl" "$P/c2.gguf" 1 1e-3 1e-4 ;;
c3data) # s17's records with the own-memory part from c2's memory: c2's own memory (memory-only, train variations 8-71,
	# 30-step episodes) read at the demos' states of seeds 26-28 through probe-tipdirect.jq, s13's short read
	# records (seeds 430-439), the records at a listing answered "focus on", s13's plain tours, and s16's
	# attempt tips, short records and plain tours
	ownmem c2 ownc3
	ownread ownc3 ownc3.jsonl tipdirect 26 27 28
	focusrecs "$P/ownc3.jsonl" "$P/short13.jsonl" >"$P/focusc3.jsonl"
	mix "$P/c3.jsonl" "$P/ownc3.jsonl" "$P/short13.jsonl" "$P/focusc3.jsonl" "$P/plain13.jsonl" \
		"$P/attempt16.jsonl" "$P/short16.jsonl" "$P/plain16.jsonl" ;;
c3) sft "$P/c2.gguf" "$P/c3.jsonl" "$P/c3.gguf" 1 3e-4 3e-5 ;;
ev)
	"$E" eval --force --env textlab --simplifications easy --temperature 0.4 --seed 1 --threads 2 --ctx 4096 --model "${2:?ev MODEL NAME}" \
		--tasks find-living-thing --ood --trials 3 --threshold 0.95 --top-k 3 --set memory.tips_in=last-turn --set memory.key=observation \
		--tip-temperature 0 --split dev --variations 8 ${EXTRA:-} -o "$P/${3:?ev MODEL NAME}-dev.json" --episodes-out "$P/$3-dev.jsonl" >"$P/$3-dev.log" 2>&1
	go build -o "$P/exptable" ./scripts/exptable
	"$P/exptable" -reading "$P/$3-dev.jsonl" ;;
*) echo "unknown probe $name" >&2 && exit 2 ;;
esac
