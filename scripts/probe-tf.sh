#!/usr/bin/env bash
# scripts/probe-tf.sh TREE TAG MODEL... (issue 36, third round of probes; not
# pre-registered): the teacher-forced loss per target token of each MODEL on
# room choices of unseen random tours (seed 99, variations 8-71) whose blocks
# come from one- or two-episode memories (read-all: the block names the room),
# with the block and with it cut out (blind): a measure of reading that the
# policy's habits cannot fake (in play, a deterministic tour "copies" a
# successful trial 1 without reading: scripts/exptable -reading's last
# column). TREE: the checkout whose bin/empo2 writes the entry format the
# models were taught (this tree: tip first; a worktree with
# scripts/probe-score-first.patch: score first, see probe-reading.sh); TAG
# names its records in build/probe.
#   scripts/probe-tf.sh . main build/probe/c2.gguf
#   scripts/probe-tf.sh /tmp/sf sf build/probe/fix4.gguf
# TOUR (default random) is the tours' order; ONE (default build/probe/doors64.jsonl)
# a JSONL whose first record is the one trained at lr 1e-9 (any chat):
#   TOUR=random-direct ONE=build/p7/plain6.jsonl scripts/probe-tf.sh . rd build/p7/s1.gguf build/p7/s6.gguf
set -euo pipefail
cd "$(dirname "$0")/.."
tree=$(cd "${1:?usage: scripts/probe-tf.sh TREE TAG MODEL...}" && pwd) tag=${2:?TAG}
shift 2
export TMPDIR=${TMPDIR:-$PWD/.tmp}
mkdir -p "$TMPDIR"
P=build/probe E=$tree/bin/empo2
ROOM='"content":"teleport to [^"]*"}\]'
mkdir -p "$P"
if [[ ! -f $P/tf-$tag-block.jsonl ]]; then
	"$E" env demos textlab --force --tasks find-living-thing --split train --skip-variations 8 --kind explore --tour "${TOUR:-random}" --seed 99 \
		--simplifications easy --key observation --threshold 0.95 --top-k 3 --tips-in last-turn --read-records 12 --read-trials 2 --tip-failures 4 \
		-o "$P/tf.tmp.jsonl" >/dev/null 2>&1
	grep '"memory":"read-all"' "$P/tf.tmp.jsonl" | grep "$ROOM" | head -150 >"$P/tf-$tag-block.jsonl"
	jq -c '.messages[-2].content |= sub("\n\n<memory>[\\s\\S]*</memory>"; "")' "$P/tf-$tag-block.jsonl" >"$P/tf-$tag-blind.jsonl"
	rm "$P/tf.tmp.jsonl"
fi
head -1 "${ONE:-$P/doors64.jsonl}" >"$P/one.jsonl"
for m in "$@"; do
	for v in block blind; do
		l=$("$E" sft --force --full -m "$m" --data "$P/one.jsonl" --val "$P/tf-$tag-$v.jsonl" -o "$P/tf.tmp.gguf" --epochs 1 --lr 1e-9 --min-lr 1e-9 --warmup 0 \
			--batch-tokens 2048 --no-pack --max-len 2048 --micro-tokens 4096 --threads 2 --seed 3 --json 2>/dev/null | grep -o '"val_loss":[0-9.]*' | tail -1)
		echo "$(basename "$m" .gguf) $v ${l#*:}"
	done
done
rm -f "$P"/tf.tmp*.gguf
