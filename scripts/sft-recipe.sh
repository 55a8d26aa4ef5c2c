#!/usr/bin/env bash
# SFT warm start on textlab (docs/sft.md): exploring demonstrations of the
# training variations of the four training families, a generated random
# Qwen2 model whose tokenizer is trained on the demos' text, LoRA SFT, then
# greedy (temperature 0) episodes on the training variations, their test
# variations and the held-out families (boil, freeze).
#
#   scripts/sft-recipe.sh            # or: make sft-recipe
#   OUT=dir EPOCHS=8 THREADS=1 scripts/sft-recipe.sh
#
# Everything is written under $OUT (default build/sft-recipe/); the figures of
# docs/sft.md come from this script (time it with the machine's load in mind).
set -euo pipefail

EMPO2=${EMPO2:-bin/empo2}
OUT=${OUT:-build/sft-recipe}
THREADS=${THREADS:-1}
EPOCHS=${EPOCHS:-4}
RANK=${RANK:-32}
LR=${LR:-5e-3}
HIDDEN=${HIDDEN:-64}
EVAL_VARS=${EVAL_VARS:-10}      # variations per family in the greedy evaluation (0: all)
SIMP=(--simplifications easy)   # explore demos need "teleport to"; eval uses the same world

mkdir -p "$OUT"
# 1. demonstrations (train) + a small validation set (dev), and the corpus
#    for the tokenizer
"$EMPO2" env demos textlab --split train --kind explore "${SIMP[@]}" -o "$OUT/train.jsonl" --text "$OUT/corpus.txt"
"$EMPO2" env demos textlab --split dev --kind explore "${SIMP[@]}" --variations 5 -o "$OUT/dev.jsonl"

# 2. a random model: 2 layers, hidden $HIDDEN, 2 heads (1 KV), FFN 2·hidden, BPE
#    vocab trained on the demos (1024 slots), context 2048 (a full-history
#    episode is ~1,300 tokens)
"$EMPO2" model init --out "$OUT/model.gguf" --corpus "$OUT/corpus.txt" --vocab 1024 \
    --layers 2 --hidden "$HIDDEN" --heads 2 --kv-heads 1 --ffn $((2 * HIDDEN)) --ctx 2048 --seed 1

# 3. LoRA SFT (all seven targets), one episode per sequence, ~2 episodes per
#    step; the adapter is rewritten after every epoch
time "$EMPO2" sft -m "$OUT/model.gguf" --data "$OUT/train.jsonl" --val "$OUT/dev.jsonl" \
    -o "$OUT/adapter.gguf" --rank "$RANK" --alpha $((2 * RANK)) --epochs "$EPOCHS" --lr "$LR" --min-lr 5e-4 \
    --warmup 5 --batch-tokens 2048 --no-pack --micro-tokens 4096 --threads "$THREADS" --seed 1 --resume \
    2> >(tee "$OUT/sft.log" >&2)

# 4. greedy evaluation
for args in "--split train --variations $EVAL_VARS" "--split test --variations $EVAL_VARS" "--tasks boil,freeze --split test"; do
    # shellcheck disable=SC2086
    "$EMPO2" sft eval textlab -m "$OUT/model.gguf" --lora "$OUT/adapter.gguf" "${SIMP[@]}" --threads "$THREADS" $args
done | tee "$OUT/eval.txt"
