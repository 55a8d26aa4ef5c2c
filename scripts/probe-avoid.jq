# Failure-block filter (the sixth round of probes, issue 36; not
# pre-registered): drops a read record at a room listing whose answer is
# "teleport to R" when R is named ("focus on X in the R") only by tips of
# entries whose episode scored below 50 (the creature was never focused:
# such a tip's room is made up) and by no entry that scored 50 or more.
# What is left teaches a policy that a failed attempt's tip is no reason to
# go to the room it names. Other records pass unchanged. Tip-first entries.
#   jq -c -f scripts/probe-avoid.jq <records.jsonl
def entries: [.messages[-2].content | split("\n")[] | select(startswith("- "))
	| capture("^- (?<tip>.*) \\(At this step the action was \"[^\"]*\"; the episode ended with score (?<s>-?[0-9.]+)/100\\.\\)$")
	| {s: (.s | tonumber), r: ([.tip | capture("focus on [a-z ]+? in the (?<r>[a-z ]+?)(?:,| and |\\.)") | .r] | first // null)}
	| select(.r != null)];
(.messages[-1].content) as $ans
| if ($ans | startswith("teleport to ")) and (.messages[-2].content | startswith("This room is called the ")) then
	entries as $e | ($ans | ltrimstr("teleport to ")) as $r
	| select(([$e[] | select(.r == $r and .s < 50)] | length) == 0 or ([$e[] | select(.r == $r and .s >= 50)] | length) > 0)
  else . end
