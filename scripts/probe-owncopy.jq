# Read records from the policy's own memory (env demos --read-memory; the
# fifth round of probes, issue 36, not pre-registered) turned into copy
# records: a record whose answer is a room choice ("teleport to …") is
# answered instead with the action of its block's *last* entry that scored
# 100 when that is a room choice too, and left out otherwise; other records
# pass unchanged (the demo's action: the answer is never the tip's text).
# The block is ordered by score, ties oldest first, so the last score-100
# entry is the successful attempt's latest exit from this very listing: a
# successful walk that revisits a room left it by several doors, and
# following the last exit from every room reaches the goal without a loop
# (following the first repeats the walk's detours forever: s8, dev).
# Tip-first entries (rollout.TipContent).
#   jq -c -f scripts/probe-owncopy.jq <own-records.jsonl
def last_best_entry:
  [.messages[-2].content | split("\n")[] | select(startswith("- "))
   | capture("\\(At this step the action was \"(?<a>[^\"]*)\"; the episode ended with score (?<s>-?[0-9.]+)/100\\.\\)$")
   | select(.s == "100")]
  | last // null;
if (.messages[-1].content | startswith("teleport to ")) then
  last_best_entry as $e
  | if $e != null and ($e.a | startswith("teleport to ")) then
      .messages[-1].content = $e.a | .meta.copy = true
    else empty end
else . end
