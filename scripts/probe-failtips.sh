#!/usr/bin/env bash
# Tips after failed episodes (the sixth round of probes, issue 36): for each eval
# --episodes-out FILE, among the memory-on episodes that scored below 100 and wrote a tip,
# how many tips name a room ("focus on X in the R") and how many say "not complete" or
# "failed". The numbers in docs/results.md, "Sixth round", came from this.
#   scripts/probe-failtips.sh build/p7/d36-s16-t99-l15-s1-dev.jsonl …
for f in "$@"; do
jq -s -r --arg f "$(basename "$f")" '[.[] | select(.setting=="on" and .score < 100 and (.tip // "") != "")] as $e
 | ($e | map(select(.tip | test("focus on [a-z ]+? in the [a-z ]+"))) | length) as $n
 | "\($f): \($n)/\($e|length) failed episodes tips name a room; \($e | map(select(.tip | test("not complete|failed"))) | length) say not complete/failed"' "$f"
done
