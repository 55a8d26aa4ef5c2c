package memstore

import (
	"fmt"
	"strconv"
	"strings"
)

// Tip writing and tip injection, as in the EMPO² reference: after an episode
// the policy is asked (TipRequest) for a one-sentence note; every step i of
// the episode then becomes an entry keyed by the context at step i, whose
// content is the note plus the action taken at that step and the final
// score, scored by the final score. Before an action, the retrieved entries
// are put in the prompt between TipsBegin and TipsEnd (FormatTips), so that
// the off-policy update can cut them out again (StripTips).

// Prompt pieces. The markers must not occur in observations; CleanTip
// removes them from generated tips.
const (
	TipsBegin  = "<memory>"
	TipsEnd    = "</memory>"
	TipsHeader = "Notes you wrote during earlier attempts at this task (they may be wrong or incomplete):"
	// MaxTipWords bounds a tip's length (the reference asks for ~100 words).
	MaxTipWords = 100
	// TipRequest is the instruction appended to an episode's chat to ask
	// the policy for its note.
	TipRequest = "The episode is over. Write one short sentence (at most 100 words) for your future self: " +
		"what you tried, what you learned, and how far you were from completing the task."
)

// CleanTip normalizes a generated tip: memory markers removed, whitespace
// runs collapsed to one space, surrounding quotes trimmed, cut to
// MaxTipWords words. It returns "" when nothing is left.
func CleanTip(s string) string {
	s = strings.NewReplacer(TipsBegin, " ", TipsEnd, " ").Replace(s)
	words := strings.Fields(s)
	if len(words) > MaxTipWords {
		words = words[:MaxTipWords]
	}
	s = strings.Join(words, " ")
	return strings.TrimSpace(strings.Trim(s, "\"'`"))
}

// Step is one step of a finished episode: the context the policy saw (the
// retrieval key) and the action it took.
type Step struct {
	Context string
	Action  string
}

// TipContent is an entry's content: the tip, then the step's action and the
// episode's final score (on the 0–100 scale of the environments).
func TipContent(tip, action string, finalScore float64) string {
	a := strings.Join(strings.Fields(action), " ")
	return fmt.Sprintf("%s (At this step the action was %q; the episode ended with score %s/100.)",
		tip, a, strconv.FormatFloat(finalScore, 'g', 4, 64))
}

// EpisodeEntries builds the entries to Add for a finished episode: one per
// step, Key = the step's context, Content = TipContent, Score = finalScore.
// Steps with the same action give the same content, which the store keeps
// once (the first step's key).
func EpisodeEntries(tip string, steps []Step, finalScore float64, trainStep int64, episode string) []Entry {
	tip = CleanTip(tip)
	out := make([]Entry, 0, len(steps))
	for _, st := range steps {
		out = append(out, Entry{
			Key:     st.Context,
			Content: TipContent(tip, st.Action, finalScore),
			Score:   finalScore,
			Step:    trainStep,
			Episode: episode,
		})
	}
	return out
}

// FormatTips renders retrieved entries as the prompt block (TipsBegin,
// TipsHeader, one "- content" line per entry, TipsEnd, each on its own
// line). It returns "" when there is nothing to show.
func FormatTips(ms []Match) string {
	if len(ms) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(TipsBegin + "\n" + TipsHeader + "\n")
	for _, m := range ms {
		b.WriteString("- ")
		b.WriteString(strings.Join(strings.Fields(m.Content), " "))
		b.WriteByte('\n')
	}
	b.WriteString(TipsEnd + "\n")
	return b.String()
}

// StripTips removes every TipsBegin…TipsEnd block (with the newline that
// ends it) from a prompt, giving the prompt the policy would have seen
// without memory. An unterminated block is removed to the end.
func StripTips(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, TipsBegin)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		rest := s[i+len(TipsBegin):]
		j := strings.Index(rest, TipsEnd)
		if j < 0 {
			return b.String()
		}
		s = strings.TrimPrefix(rest[j+len(TipsEnd):], "\n")
	}
}
