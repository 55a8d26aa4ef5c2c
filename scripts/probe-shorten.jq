# Shortened read records (probes after gate run 4, not pre-registered):
# each record keeps the system message, the task's first user turn and its
# answer (weight 0), and the record's last user turn (observation + memory
# block) with its target; the turns between are dropped. Records whose
# target's prompt is the first user turn are skipped.
#   jq -c -f scripts/probe-shorten.jq <records.jsonl
(if .messages[0].role == "system" then 1 else 0 end) as $i
| select((.messages | length) - 2 > $i)
| .messages = .messages[:$i] + [.messages[$i], (.messages[$i + 1] + {weight: 0}), .messages[-2], .messages[-1]]
