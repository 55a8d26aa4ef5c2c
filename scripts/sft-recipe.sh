#!/usr/bin/env bash
# SFT warm start on textlab (docs/sft.md): exploring demonstrations of the
# training variations of the four training families, a generated random
# Qwen2 model whose tokenizer is trained on the demos' text, full SFT (every
# weight: `empo2 sft --full`, a new base GGUF), then greedy (temperature 0)
# episodes on the training variations, their test variations and the
# held-out families (boil, freeze).
#
#   scripts/sft-recipe.sh            # or: make sft-recipe
#   OUT=dir EPOCHS=8 THREADS=2 scripts/sft-recipe.sh
#   LORA=1 RANK=32 scripts/sft-recipe.sh   # the LoRA variant (docs/sft.md: far weaker here)
#
# Everything is written under $OUT (default build/sft-recipe/); the figures of
# docs/sft.md come from this script (time it with the machine's load in mind).
set -euo pipefail

EMPO2=${EMPO2:-bin/empo2}
OUT=${OUT:-build/sft-recipe}
THREADS=${THREADS:-2}
EPOCHS=${EPOCHS:-14}
LR=${LR:-4e-3}
MIN_LR=${MIN_LR:-2e-4}
HIDDEN=${HIDDEN:-64}
LORA=${LORA:-0}                 # 1: LoRA SFT (rank $RANK) instead of --full
RANK=${RANK:-32}
EVAL_VARS=${EVAL_VARS:-0}       # variations per family in the greedy evaluation (0: all)
SIMP=(--simplifications easy)   # explore demos need "teleport to"; eval uses the same world

mkdir -p "$OUT"
# 1. demonstrations (train) + a small validation set (dev), and the corpus
#    for the tokenizer
"$EMPO2" env demos textlab --force --split train --kind explore "${SIMP[@]}" -o "$OUT/train.jsonl" --text "$OUT/corpus.txt"
"$EMPO2" env demos textlab --force --split dev --kind explore "${SIMP[@]}" --variations 5 -o "$OUT/dev.jsonl"

# 2. a random model: 2 layers, hidden $HIDDEN, 2 heads (1 KV), FFN 2·hidden, BPE
#    vocab trained on the demos (1024 slots), context 2048 (a full-history
#    episode is ~1,300 tokens)
"$EMPO2" model init --force --out "$OUT/model.gguf" --corpus "$OUT/corpus.txt" --vocab 1024 \
    --layers 2 --hidden "$HIDDEN" --heads 2 --kv-heads 1 --ffn $((2 * HIDDEN)) --ctx 2048 --seed 1

# 3. SFT, one episode per sequence, ~2 episodes per step; the output is
#    rewritten after every epoch. Full (default): every weight, written as a
#    new base model $OUT/sft.gguf. LORA=1: an adapter $OUT/adapter.gguf.
COMMON=(--data "$OUT/train.jsonl" --val "$OUT/dev.jsonl" --epochs "$EPOCHS" --lr "$LR" --min-lr "$MIN_LR"
    --warmup 10 --batch-tokens 2048 --no-pack --micro-tokens 4096 --threads "$THREADS" --seed 1 --resume --json)
if [[ "$LORA" == 1 ]]; then
    time "$EMPO2" sft --force -m "$OUT/model.gguf" -o "$OUT/adapter.gguf" --rank "$RANK" --alpha $((2 * RANK)) "${COMMON[@]}" \
        2> >(tee "$OUT/sft.log" >&2)
    POLICY=(-m "$OUT/model.gguf" --lora "$OUT/adapter.gguf")
else
    time "$EMPO2" sft --force -m "$OUT/model.gguf" --full -o "$OUT/sft.gguf" "${COMMON[@]}" 2> >(tee "$OUT/sft.log" >&2)
    POLICY=(-m "$OUT/sft.gguf")
fi

# 4. greedy evaluation
for args in "--split train --variations $EVAL_VARS" "--split test --variations $EVAL_VARS" "--tasks boil,freeze --split test"; do
    # shellcheck disable=SC2086
    "$EMPO2" sft eval textlab "${POLICY[@]}" "${SIMP[@]}" --threads "$THREADS" $args
done | tee "$OUT/eval.txt"
