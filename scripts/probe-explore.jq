# Exploration filter (the sixth round of probes, issue 36; not
# pre-registered): drops a read record answered "teleport to R" when R is
# among the rooms a low-score entry's tip says were looked at ("I looked
# around the A, the B …", an entry whose episode scored below 50: the
# creature was not focused there) and no entry that scored 50 or more
# names R. What is left answers a block of failed attempts with a room
# they did not look at: the memory says where not to go again. Other
# records pass unchanged. Tip-first entries.
# As it ran for s15 and s16 it keeps a record only when a good entry's
# *tip* names R, not when a good entry's *action* was "teleport to R": of
# the 429 records it dropped from s16's short read records, 53 answered
# what a score >= 50 entry did there (measured after s16; kept as run so
# the records can be rebuilt).
#   jq -c -f scripts/probe-explore.jq <records.jsonl
def entries: [.messages[-2].content | split("\n")[] | select(startswith("- "))
	| capture("^- (?<tip>.*) \\(At this step the action was \"[^\"]*\"; the episode ended with score (?<s>-?[0-9.]+)/100\\.\\)$")
	| {s: (.s | tonumber), tip}];
def looked: [.tip | capture("^I looked around (?<l>[^.]*)\\.") | .l | split(", ") | .[] | split(" and ") | .[]
	| ltrimstr("the ") | select(test("^[a-z ]+$"))];
def named: [.tip | capture("focus on [a-z ]+? in the (?<r>[a-z ]+?)(?:,| and |\\.)") | .r];
(.messages[-1].content) as $ans
| if ($ans | startswith("teleport to ")) and (.messages[-2].content | test("<memory>")) then
	entries as $e | ($ans | ltrimstr("teleport to ")) as $r
	| select(([$e[] | select(.s < 50) | looked[] | select(. == $r)] | length) == 0
		or ([$e[] | select(.s >= 50) | named[] | select(. == $r)] | length) > 0)
  else . end
