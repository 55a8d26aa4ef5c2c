# Read records with smaller blocks (probes after gate run 4, not
# pre-registered): a read-all record keeps only its block's entries that
# scored 100 (its demo's), and, at even steps, the first other entry too; so
# its block holds 1 or 2 entries, as a memory of one or two earlier trials
# does at the gate. With $fail true a read-fail record (only failed
# attempts) keeps its first entry, and its first two at even steps. Other
# records pass unchanged. Needs the score-first entries of
# scripts/probe-score-first.patch.
#   jq -c --argjson fail false -f scripts/probe-trim.jq <records.jsonl
def entry: startswith("- (The episode ended with score ");
def best: startswith("- (The episode ended with score 100/100;");
def trim($keepbest; $others):
  .messages[-1 - 1].content |= (split("\n")
    | reduce .[] as $x ({out: [], n: 0};
        if ($x | entry | not) or ($keepbest and ($x | best)) then .out += [$x]
        elif .n < $others then .out += [$x] | .n += 1
        else . end)
    | .out | join("\n"));
(if (.meta.step // 1) % 2 == 0 then 1 else 0 end) as $even
| if .meta.memory == "read-all" then trim(true; $even)
  elif $fail and .meta.memory == "read-fail" then trim(false; 1 + $even)
  else . end
