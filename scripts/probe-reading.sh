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
#                                   #   then sf3 dense short short2 short3 fix1 fix2 fix3 fix4, in this order (each uses the last's)
#                                   #   third round (2026-12-02, 07:00-08:00): c1 c2 (c2g) r1 in this tree (tip first);
#                                   #   rf1 rf2 rs1 rf3 rf4 rf5 rf6 in the score-first worktree (after fix4, short3)
#
# sf3 and dense (2026-12-02, second session) ran on a tree with
# scripts/probe-score-first.patch applied (an entry's code-written score and
# action placed before its tip, so that a causal model sees the score before
# the action it would copy); run them in a worktree with that patch:
#   git worktree add /tmp/sf HEAD && cd /tmp/sf && git apply scripts/probe-score-first.patch && make
#   ln -s "$OLDPWD/build" build && scripts/probe-reading.sh sf3
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
export TMPDIR=${TMPDIR:-$PWD/.tmp} CGO_CFLAGS=${CGO_CFLAGS:--O3 -march=native} CGO_CXXFLAGS=${CGO_CXXFLAGS:--O3 -march=native}
mkdir -p "$TMPDIR"
MEM=(--key observation --threshold 0.95 --top-k 3 --tips-in last-turn)
# ROOM: a record whose answer is a room choice; EMPTY: a record whose block
# lost every entry (probe-trim.jq)
ROOM='"content":"teleport to [^"]*"}\]'
EMPTY='(they may be wrong or incomplete):\\n</memory>'
# AFTER: a record whose answer is a step after the creature is found
AFTER='"content":"(focus on|pick up|move) [^"]*"}\]'
# rand SEED RECORDS OUT: memory-reading records (read-all only: the block
# holds the demo, score 100, and attempts deviating from it) on random-tour
# explore demos of find-living-thing train variations 8… (outside the pool)
rand() {
	"$E" env demos textlab --force --tasks find-living-thing --split train --skip-variations 8 ${4:+--variations $4} --kind explore --tour random \
		--seed "$1" --simplifications easy "${MEM[@]}" --read-records "$2" ${RT:+--read-trials $RT} -o "$P/rs.tmp.jsonl" >/dev/null
	grep '"memory":"read-all"' "$P/rs.tmp.jsonl" >"$3"
	rm "$P/rs.tmp.jsonl"
}
# rtour SEED N OUT: random-tour explore demos of find-living-thing train
# variations 8… (seed SEED), each with N read records whose blocks come from
# one- or two-episode memories (--read-trials 2); N 0: the plain demos only
rtour() {
	local read=()
	(($2 == 0)) || read=("${MEM[@]}" --read-records "$2" --read-trials 2 --tip-failures 4)
	"$E" env demos textlab --force --tasks find-living-thing --split train --skip-variations 8 --kind explore --tour random \
		--seed "$1" --simplifications easy "${read[@]}" -o "$3" >/dev/null
}
doors() { "$E" env demos textlab --force --tasks find-living-thing --split train --skip-variations 8 --kind explore --simplifications easy -o "$1" >/dev/null; }
sft() { # sft FROM DATA OUT EPOCHS [VAL]
	"$E" sft --force --full -m "$1" --data "$2" --val "${5:-$G3/rl-dev.jsonl}" -o "$3" --epochs "$4" --lr 1e-3 --min-lr 1e-4 --warmup 5 \
		--batch-tokens 2048 --no-pack --max-len 2048 --micro-tokens 4096 --threads 2 --seed 3 --json >"${3%.gguf}-epochs.jsonl" 2>"${3%.gguf}.log"
}
# tfloss MODEL VAL: the model's teacher-forced loss per target token on VAL
# (one step at lr 1e-9 on one plain demo, then the validation pass)
tfloss() {
	head -1 "$P/doors64.jsonl" >"$P/one.jsonl"
	"$E" sft --force --full -m "$1" --data "$P/one.jsonl" --val "$2" -o "$P/tf.tmp.gguf" --epochs 1 --lr 1e-9 --min-lr 1e-9 --warmup 0 \
		--batch-tokens 2048 --no-pack --max-len 2048 --micro-tokens 4096 --threads 2 --seed 3 --json 2>/dev/null | grep -o '"val_loss":[0-9.]*'
	rm -f "$P"/tf.tmp*.gguf
}
name=${1:?usage: scripts/probe-reading.sh NAME}
model=$P/$name.gguf
score_first() { grep -q 'The episode ended with score %s/100; at this step' trainer/rollout/tips.go ||
	{ echo "probe $name needs scripts/probe-score-first.patch applied (see the header)" >&2 && exit 2; }; }
case $name in
base) model=$G4/sft.gguf ;; # gate run 4's final warm start
g3) model=$G3/sft.gguf ;;   # gate run 3's final warm start
e8) sft "$G4/sft-stage2.gguf" "$G4/read-own.jsonl" "$model" 8 ;; # gate run 4's reading stage, 8 epochs instead of 2
rand3) rand 0 24 "$P/rand.jsonl" && sft "$G4/sft.gguf" "$P/rand.jsonl" "$model" 3 ;;
mix2) rand 0 24 "$P/rand32.jsonl" 32 && doors "$P/doors64.jsonl" &&
	cat "$P/rand32.jsonl" "$P/doors64.jsonl" | shuf --random-source=<(yes) >"$P/mix2.jsonl" && sft "$G3/sft.gguf" "$P/mix2.jsonl" "$model" 3 ;;
mix3 | mix5 | sf3)
	n=4 epochs=4
	[[ $name == mix5 ]] && n=8 epochs=6
	[[ $name == sf3 ]] && score_first # mix3 with the score before the action
	: >"$P/$name-read.jsonl"
	for s in $(seq 1 $n); do rand "$s" 3 "$P/r.jsonl" && cat "$P/r.jsonl" >>"$P/$name-read.jsonl"; done
	rm -f "$P/r.jsonl"
	doors "$P/doors64.jsonl"
	cat "$P/$name-read.jsonl" "$P/doors64.jsonl" | shuf --random-source=<(yes) >"$P/$name.jsonl"
	sft "$G3/sft.gguf" "$P/$name.jsonl" "$model" "$epochs" ;;
dense) # mix3's records + the room-choice read records of 11 more random-tour
	# seeds (a dense copy signal: 1,435 read records, 2,108 in all), 3 epochs;
	# then the teacher-forced loss on room choices of seen tours and of new ones
	score_first
	: >"$P/dense-read.jsonl"
	for s in $(seq 1 4); do rand "$s" 3 "$P/r.jsonl" && cat "$P/r.jsonl" >>"$P/dense-read.jsonl"; done
	for s in $(seq 11 21); do rand "$s" 12 "$P/r.jsonl" && { grep "$ROOM" "$P/r.jsonl" >>"$P/dense-read.jsonl" || true; }; done
	doors "$P/doors64.jsonl"
	cat "$P/dense-read.jsonl" "$P/doors64.jsonl" | shuf --random-source=<(yes) >"$P/dense.jsonl"
	sft "$G3/sft.gguf" "$P/dense.jsonl" "$model" 3
	rand 99 12 "$P/r.jsonl" && grep "$ROOM" "$P/r.jsonl" | head -150 >"$P/val-new.jsonl"
	grep "$ROOM" "$P/dense-read.jsonl" | tail -150 >"$P/val-train.jsonl"
	rm -f "$P/r.jsonl"
	for m in dense sf3; do for v in train new; do echo "teacher-forced $m on $v tours: $(tfloss "$P/$m.gguf" "$P/val-$v.jsonl")"; done; done ;;
short | short2) # shortened read records (scripts/probe-shorten.jq: the task's
	# first turn, then only the record's last turn with its block), many seeds:
	# short: room choices only (seeds 100-145), from dense, 1 epoch;
	# short2: every step kind (seeds 200-223), from short, 2 epochs
	score_first
	from=$P/dense.gguf seeds="100 145" filter=$ROOM epochs=1
	[[ $name == short2 ]] && from=$P/short.gguf seeds="200 223" filter='"memory":"read-all"' epochs=2
	: >"$P/$name-raw.jsonl"
	for s in $(seq $seeds); do rand "$s" 12 "$P/r.jsonl" && { grep "$filter" "$P/r.jsonl" >>"$P/$name-raw.jsonl" || true; }; done
	rm -f "$P/r.jsonl"
	jq -c -f scripts/probe-shorten.jq <"$P/$name-raw.jsonl" >"$P/$name.jsonl"
	cat "$P/$name.jsonl" "$P/doors64.jsonl" | shuf --random-source=<(yes) >"$P/$name-mix.jsonl"
	sft "$from" "$P/$name-mix.jsonl" "$model" "$epochs" "$P/val-new.jsonl" ;;
short3) # short2's records and dense's (full history), from short, 1 epoch
	score_first
	cat "$P/short2.jsonl" "$P/dense.jsonl" | shuf --random-source=<(yes) >"$P/short3-mix.jsonl"
	sft "$P/short.gguf" "$P/short3-mix.jsonl" "$model" 1 "$P/val-new.jsonl" ;;
fix1 | fix2) # back to the policy's own (doors-order) tours: doors read records
	# (with the plain demos) + random-tour room-choice records of dense's
	# fix1: from short3, read records 3 per demo (seed 1) + 300 random, 2 epochs
	# fix2: from fix1, read records 12 per demo (seed 2) + 100 random, 1 epoch
	score_first
	from=$P/short3.gguf seed=1 records=3 nrand=300 src=(yes) epochs=2
	[[ $name == fix2 ]] && from=$P/fix1.gguf seed=2 records=12 nrand=100 src=(yes yes) epochs=1
	"$E" env demos textlab --force --tasks find-living-thing --split train --skip-variations 8 --kind explore --seed "$seed" \
		--simplifications easy "${MEM[@]}" --read-records "$records" -o "$P/$name-doors.jsonl" >/dev/null
	grep "$ROOM" "$P/dense-read.jsonl" | shuf --random-source=<("${src[@]}") | head -"$nrand" >"$P/$name-rand.jsonl"
	cat "$P/$name-doors.jsonl" "$P/$name-rand.jsonl" | shuf --random-source=<(yes) >"$P/$name.jsonl"
	sft "$from" "$P/$name.jsonl" "$model" "$epochs" "$P/val-new.jsonl" ;;
fix3) # fix2's doors records and fix1's random ones with smaller blocks
	# (scripts/probe-trim.jq: 1-2 entries, as at the gate's trial 2), from fix1, 1 epoch
	score_first
	jq -c --argjson fail false -f scripts/probe-trim.jq <"$P/fix2-doors.jsonl" >"$P/fix3-doors.jsonl"
	jq -c --argjson fail false -f scripts/probe-trim.jq <"$P/fix1-rand.jsonl" >"$P/fix3-rand.jsonl"
	cat "$P/fix3-doors.jsonl" "$P/fix3-rand.jsonl" | grep -v "$EMPTY" |
		shuf --random-source=<(yes) >"$P/fix3.jsonl"
	sft "$P/fix1.gguf" "$P/fix3.jsonl" "$model" 1 "$P/val-new.jsonl" ;;
fix4) # fix3's records with the read-fail blocks trimmed too (1-2 failed entries:
	# what a failed trial 1 leaves), from fix3, 1 epoch
	score_first
	jq -c --argjson fail true -f scripts/probe-trim.jq <"$P/fix2-doors.jsonl" >"$P/fix4-doors.jsonl"
	cat "$P/fix4-doors.jsonl" "$P/fix3-rand.jsonl" | grep -v "$EMPTY" |
		shuf --random-source=<(yes) >"$P/fix4.jsonl"
	sft "$P/fix3.gguf" "$P/fix4.jsonl" "$model" 1 "$P/val-new.jsonl" ;;
c1) # (third round, main's entry format: tip first) the condensed recipe's
	# first stage: from gate run 3's warm start, short's records (shortened
	# random-tour room choices, seeds 100-145) + the plain doors demos, 1 epoch
	: >"$P/c1-raw.jsonl"
	for s in $(seq 100 145); do rand "$s" 12 "$P/r.jsonl" && { grep "$ROOM" "$P/r.jsonl" >>"$P/c1-raw.jsonl" || true; }; done
	rm -f "$P/r.jsonl"
	doors "$P/doors64.jsonl"
	jq -c -f scripts/probe-shorten.jq <"$P/c1-raw.jsonl" | cat - "$P/doors64.jsonl" | shuf --random-source=<(yes) >"$P/c1.jsonl"
	sft "$G3/sft.gguf" "$P/c1.jsonl" "$model" 1 ;;
c2) # from c1: doors-order read records whose blocks come from one- or
	# two-episode memories (env demos --read-trials 2: what the gate's trials
	# 2-3 see), 12 per demo (seed 2, with the plain demos), + 300 random-tour
	# room-choice records built the same way (seeds 11-21), 2 epochs
	"$E" env demos textlab --force --tasks find-living-thing --split train --skip-variations 8 --kind explore --seed 2 \
		--simplifications easy "${MEM[@]}" --read-records 12 --read-trials 2 --tip-failures 4 -o "$P/c2-doors.jsonl" >/dev/null
	: >"$P/c2-rall.jsonl"
	for s in $(seq 11 21); do RT=2 rand "$s" 12 "$P/r.jsonl" && { grep "$ROOM" "$P/r.jsonl" >>"$P/c2-rall.jsonl" || true; }; done
	rm -f "$P/r.jsonl"
	shuf -n 300 --random-source=<(yes) "$P/c2-rall.jsonl" | cat - "$P/c2-doors.jsonl" | shuf --random-source=<(yes) >"$P/c2.jsonl"
	sft "$P/c1.gguf" "$P/c2.jsonl" "$model" 2 ;;
c2g) # c2's records and epochs from gate run 3's warm start (no c1): is c1's copy stage needed?
	sft "$G3/sft.gguf" "$P/c2.jsonl" "$model" 2 ;;
r1 | rf1) # random-tour demos of find-living-thing train variations 8-71,
	# seeds 11-14 (the policy's own tours become random), each with 4 read
	# records whose blocks come from one- or two-episode memories
	# (--read-trials 2; read-all and read-fail):
	# r1: from c1 (tip first), 2 epochs; rf1: (score first) from fix4, which
	# copies its memory, the same records built with the score first, 1 epoch
	from=$P/c1.gguf epochs=2
	[[ $name == rf1 ]] && score_first && from=$P/fix4.gguf epochs=1
	: >"$P/$name.jsonl.tmp"
	for s in $(seq 11 14); do rtour "$s" 4 "$P/r.jsonl" && cat "$P/r.jsonl" >>"$P/$name.jsonl.tmp"; done
	rm -f "$P/r.jsonl"
	shuf --random-source=<(yes) "$P/$name.jsonl.tmp" >"$P/$name.jsonl" && rm "$P/$name.jsonl.tmp"
	sft "$from" "$P/$name.jsonl" "$model" "$epochs" ;;
rf2) # (score first) from rf1: more copying per plain tour — random-tour read
	# records only (seeds 15-16, 12 per demo, one- or two-episode memories)
	# + the plain random-tour demos of one seed (17), 1 epoch
	score_first
	: >"$P/rf2.jsonl.tmp"
	for s in 15 16; do rtour "$s" 12 "$P/r.jsonl" && grep '"read":true' "$P/r.jsonl" >>"$P/rf2.jsonl.tmp"; done
	rtour 17 0 "$P/r.jsonl" && cat "$P/r.jsonl" >>"$P/rf2.jsonl.tmp"
	rm -f "$P/r.jsonl"
	shuf --random-source=<(yes) "$P/rf2.jsonl.tmp" >"$P/rf2.jsonl" && rm "$P/rf2.jsonl.tmp"
	sft "$P/rf1.gguf" "$P/rf2.jsonl" "$model" 1 ;;
rs1) # (score first) rf1's records from short3 (the best reader under teacher
	# forcing on random tours, whose skills without memory had broken), 1 epoch
	score_first
	sft "$P/short3.gguf" "$P/rf1.jsonl" "$model" 1 ;;
rf3) # (score first) from rf2 (a random tourer): a dense copy signal on
	# one- or two-episode memories — random-tour room-choice read-all records
	# (seeds 100-130, --read-trials 2), shortened (probe-shorten.jq), + the
	# plain random-tour demos of seed 17, 1 epoch
	score_first
	: >"$P/rf3-raw.jsonl"
	for s in $(seq 100 130); do RT=2 rand "$s" 12 "$P/r.jsonl" && { grep "$ROOM" "$P/r.jsonl" >>"$P/rf3-raw.jsonl" || true; }; done
	rtour 17 0 "$P/r.jsonl"
	jq -c -f scripts/probe-shorten.jq <"$P/rf3-raw.jsonl" | cat - "$P/r.jsonl" | shuf --random-source=<(yes) >"$P/rf3.jsonl"
	rm -f "$P/r.jsonl"
	sft "$P/rf2.gguf" "$P/rf3.jsonl" "$model" 1 ;;
rf4 | rf5) # (score first) full-history random-tour read records of every
	# step kind (12 per demo, --read-trials 2, read-all and read-fail, with
	# the plain demos) + 500 of rf3's shortened room-choice records, 1 epoch:
	# rf4: from rf3 (reads room choices beyond its habit, but garbles the
	# steps after the creature is found), seeds 18-19;
	# rf5: from rf4, seeds 20-21 and 500 other shortened records
	score_first
	from=$P/rf3.gguf seeds="18 19" src=(yes)
	[[ $name == rf5 ]] && from=$P/rf4.gguf seeds="20 21" src=(yes yes)
	: >"$P/$name.jsonl.tmp"
	for s in $seeds; do rtour "$s" 12 "$P/r.jsonl" && cat "$P/r.jsonl" >>"$P/$name.jsonl.tmp"; done
	rm -f "$P/r.jsonl"
	jq -c -f scripts/probe-shorten.jq <"$P/rf3-raw.jsonl" | shuf -n 500 --random-source=<("${src[@]}") >>"$P/$name.jsonl.tmp"
	shuf --random-source=<(yes) "$P/$name.jsonl.tmp" >"$P/$name.jsonl" && rm "$P/$name.jsonl.tmp"
	sft "$from" "$P/$name.jsonl" "$model" 1 ;;
rf6) # (score first) from rf4 (reads rooms; garbles the steps after the
	# creature is found when a block is shown: gate run 6): the read records
	# of those steps (focus, pick up, move) of seeds 22-25 (20 per demo,
	# --read-trials 2), every read record of seeds 22-23, the plain demos of
	# seed 22, 1 epoch
	score_first
	: >"$P/rf6.jsonl.tmp"
	for s in 22 23 24 25; do
		rtour "$s" 20 "$P/r.jsonl"
		if ((s <= 23)); then
			grep '"read":true' "$P/r.jsonl" >>"$P/rf6.jsonl.tmp"
		else
			grep '"read":true' "$P/r.jsonl" | grep -E "$AFTER" >>"$P/rf6.jsonl.tmp" || true
		fi
		((s != 22)) || grep -v '"read":true' "$P/r.jsonl" >>"$P/rf6.jsonl.tmp"
	done
	rm -f "$P/r.jsonl"
	shuf --random-source=<(yes) "$P/rf6.jsonl.tmp" >"$P/rf6.jsonl" && rm "$P/rf6.jsonl.tmp"
	sft "$P/rf4.gguf" "$P/rf6.jsonl" "$model" 1 ;;
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
