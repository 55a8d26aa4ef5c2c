# Tip-reading records (the fifth round of probes, issue 36; not
# pre-registered): a read record whose answer is a room choice at a room
# listing ("This room is called the …", before the creature is found) is
# answered instead with "teleport to R" when one of its block's score-100
# entries has a tip whose "Score came from …" clause says "focus on X in the
# R" and R is not the room the agent is in: the tip names where the
# creature was, so the policy goes there directly instead of replaying the
# earlier walk. Other records pass unchanged. Tip-first entries.
#   jq -c -f scripts/probe-tipdirect.jq <records.jsonl
def tip_room:
  [.messages[-2].content | split("\n")[] | select(startswith("- "))
   | capture("^- (?<tip>.*) \\(At this step the action was \"[^\"]*\"; the episode ended with score (?<s>-?[0-9.]+)/100\\.\\)$")
   | select(.s == "100")
   | .tip | capture("Score came from [^.]*?focus on [a-z ]+? in the (?<r>[a-z ]+?)(?:,| and |\\.)") | .r]
  | first // null;
([.messages[-2].content | capture("^This room is called the (?<r>[a-z ]+)\\.") | .r] | first) as $here
| if (.messages[-1].content | startswith("teleport to ")) and $here != null then
    tip_room as $r
    | if $r != null and $r != $here then .messages[-1].content = "teleport to " + $r | .meta.tipdirect = true else . end
  else . end
