#!/usr/bin/env bash
# After-success / after-failure split (the sixth round of probes, issue 36): for each
# eval --episodes-out FILE, trials 2…K with memory and the control, split by whether the
# same setting's trial 1 at that variation succeeded (score 100). The numbers in
# docs/results.md, "Sixth round", came from this.
#   scripts/probe-split.sh build/p7/d36-s16-t99-l15-s1-dev.jsonl …
for f in "$@"; do
jq -s -r --arg f "$(basename "$f")" '
  (map(select(.trial==1)) | map({key:"\(.setting) \(.variation)", value:(.score>=100)}) | from_entries) as $t1
  | map(select(.trial>1)) | group_by(.setting)[] | . as $g
  | ($g[0].setting) as $set
  | [ ($g|map(select($t1["\($set) \(.variation)"]))), ($g|map(select($t1["\($set) \(.variation)"]|not))) ] as [$a,$b]
  | "\($f) \($set): after-success n=\($a|length) mean=\(if ($a|length)>0 then ($a|map(.score)|add/length*10|round/10) else "-" end) | after-fail n=\($b|length) mean=\(if ($b|length)>0 then ($b|map(.score)|add/length*10|round/10) else "-" end)"' "$f"
done
