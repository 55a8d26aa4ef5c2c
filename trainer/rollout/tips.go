package rollout

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/empo2/empo2/memstore"
)

// Tip writing and tip injection, as the EMPO² reference code does them:
// after an episode the policy is asked, in a new user turn after the
// episode's chat (TipMessages), for a one-line note; every step i of the
// episode then becomes a memory entry whose content is the note plus the
// action taken at that step and the final score, scored by the final score
// (EpisodeEntries). The entries' key is the episode's final conversation
// (memory.key "conversation", the reference) or each step's task and
// observation ("observation"). Before an action, the retrieved entries
// become one block (FormatTips) between TipsBegin and TipsEnd at the end of
// the user message the action answers (Messages; with memory.tips_in
// "every-turn" earlier turns keep theirs), which the Renderer tokenizes with
// the message's text as one text and locates as a span.
// (This file moved here from memstore, which stays a pure store.)

// Prompt pieces. The markers must not occur in observations (Messages
// neutralizes them there) and CleanTip removes them from generated tips.
const (
	TipsBegin  = "<memory>"
	TipsEnd    = "</memory>"
	TipsHeader = "Notes you wrote during earlier attempts at this task (they may be wrong or incomplete):"
	// TipSep separates the tip block from the user message it ends.
	TipSep = "\n\n"
	// MaxTipWords bounds a tip's length (the reference asks for ~100 words).
	MaxTipWords = 100
	// TipRequest is the user message that follows an episode's chat to
	// ask the policy for its note (one line: generation stops at the end of
	// the line).
	TipRequest = "The episode is over. Write one short sentence (at most 100 words) on a single line for your future self: " +
		"what you tried, what you learned, and how far you were from completing the task."
)

// CleanTip normalizes a generated tip: a think block (<think>…</think>)
// and memory markers removed, whitespace runs collapsed to one space,
// surrounding quotes trimmed, cut to MaxTipWords words, invalid UTF-8
// replaced. It returns "" when nothing is left.
func CleanTip(s string) string {
	s = stripThink(strings.ToValidUTF8(s, "\uFFFD"))
	s = strings.NewReplacer(TipsBegin, " ", TipsEnd, " ").Replace(s)
	words := strings.Fields(s)
	if len(words) > MaxTipWords {
		words = words[:MaxTipWords]
	}
	s = strings.Join(words, " ")
	return strings.TrimSpace(strings.Trim(s, "\"'`"))
}

// TipStep is one step of a finished episode: the key its entry is stored
// under (memory.key "conversation": the episode's final conversation for
// every step; "observation": the step's task and observation) and the
// action the environment received.
type TipStep struct {
	Context string
	Action  string
}

// TipContent is an entry's content: the tip, then the step's action and the
// episode's final score (on the 0–100 scale of the environments), both
// written by code and therefore true however weak the tip. The action is
// the one the environment received (after parsing and any correction),
// where the reference code's last version records the raw model output: in
// the naive format the two are the same line, and a cot response's
// reasoning does not belong in a one-line memory.
func TipContent(tip, action string, finalScore float64) string {
	a := strings.Join(strings.Fields(strings.ToValidUTF8(action, "\uFFFD")), " ")
	return fmt.Sprintf("%s (At this step the action was %q; the episode ended with score %s/100.)",
		tip, a, strconv.FormatFloat(finalScore, 'g', 4, 64))
}

// tipContentRe matches TipContent's code-written tail.
var tipContentRe = regexp.MustCompile(`^(.*) \(At this step the action was ("(?:[^"\\]|\\.)*"); the episode ended with score (-?[0-9.eE+]+)/100\.\)$`)

// ParseTipContent is TipContent's inverse: the tip, action and final score
// of an entry's content, or of a block line ("- " + content); ok is false
// when s is not in TipContent's form.
func ParseTipContent(s string) (tip, action string, score float64, ok bool) {
	m := tipContentRe.FindStringSubmatch(strings.TrimPrefix(strings.TrimSpace(s), "- "))
	if m == nil {
		return "", "", 0, false
	}
	a, err := strconv.Unquote(m[2])
	if err != nil {
		return "", "", 0, false
	}
	sc, err := strconv.ParseFloat(m[3], 64)
	if err != nil {
		return "", "", 0, false
	}
	return m[1], a, sc, true
}

// EpisodeEntries builds the entries to Add for a finished episode: one per
// step, Key = the step's key, Content = TipContent, Score = finalScore,
// Step = trainStep. Steps with the same action give the same content, which
// the store keeps once (the first step's key). An empty tip (after
// CleanTip) gives no entries.
func EpisodeEntries(tip string, steps []TipStep, finalScore float64, trainStep int64, episode string) []memstore.Entry {
	tip = CleanTip(tip)
	if tip == "" {
		return nil
	}
	out := make([]memstore.Entry, 0, len(steps))
	for _, st := range steps {
		out = append(out, memstore.Entry{
			Key:     st.Context,
			Content: TipContent(tip, st.Action, finalScore),
			Score:   finalScore,
			Step:    trainStep,
			Episode: episode,
		})
	}
	return out
}

// FormatTips renders retrieved entries as the tip block: TipsBegin,
// TipsHeader, one "- content" line per entry, TipsEnd, each on its own line
// (no trailing newline; Messages puts it after a blank line at the end of
// the last user message). It returns "" when there is nothing to show.
func FormatTips(ms []memstore.Match) string {
	if len(ms) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(TipsBegin + "\n" + TipsHeader + "\n")
	for _, m := range ms {
		b.WriteString("- ")
		b.WriteString(neutralize(strings.Join(strings.Fields(m.Content), " ")))
		b.WriteByte('\n')
	}
	b.WriteString(TipsEnd)
	return b.String()
}

// StripTips removes every tip block (TipsBegin…TipsEnd, with the blank
// line before it when present) from a text, giving the text the policy
// would have seen without memory. An unterminated block is removed to the
// end. Token-level stripping is ChatTokens / StepRecord.PromptWithoutTips.
func StripTips(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, TipsBegin)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(strings.TrimSuffix(s[:i], TipSep))
		rest := s[i+len(TipsBegin):]
		j := strings.Index(rest, TipsEnd)
		if j < 0 {
			return b.String()
		}
		s = rest[j+len(TipsEnd):]
	}
}

// neutralize breaks memory markers inside text that is not a tip block
// (observations, task descriptions, tips themselves), so that a tip block
// can only be the one FormatTips made.
func neutralize(s string) string {
	if !strings.Contains(s, "<memory>") && !strings.Contains(s, "</memory>") {
		return s
	}
	return strings.NewReplacer(TipsBegin, "<memory >", TipsEnd, "</memory >").Replace(s)
}
