package environments

import "strings"

// Jaccard is the Jaccard similarity of the word sets of a and b
// (lower-cased, split on white space): |A∩B| / |A∪B|, 0 when both are empty.
func Jaccard(a, b string) float64 { return jaccardSets(wordSet(a), wordSet(b)) }

func jaccardSets(wa, wb map[string]struct{}) float64 {
	if len(wa) == 0 && len(wb) == 0 {
		return 0
	}
	inter := 0
	for w := range wa {
		if _, ok := wb[w]; ok {
			inter++
		}
	}
	union := len(wa) + len(wb) - inter
	return float64(inter) / float64(union)
}

func wordSet(s string) map[string]struct{} {
	f := strings.Fields(strings.ToLower(s))
	m := make(map[string]struct{}, len(f))
	for _, w := range f {
		m[w] = struct{}{}
	}
	return m
}

// CorrectAction maps action onto valid the way the EMPO² recipe does: an
// action found in valid (ignoring case and surrounding space) is kept;
// otherwise the valid action with the highest Jaccard word similarity
// replaces it (the first one on ties). It returns action unchanged when
// valid is empty; changed reports whether a replacement happened.
func CorrectAction(action string, valid []string) (out string, changed bool) {
	norm := strings.Join(strings.Fields(strings.ToLower(action)), " ")
	if len(valid) == 0 {
		return action, false
	}
	words := wordSet(action) // once, not once per valid action
	best, bestScore := -1, -1.0
	for i, v := range valid {
		if strings.Join(strings.Fields(strings.ToLower(v)), " ") == norm {
			return action, false
		}
		if s := jaccardSets(words, wordSet(v)); s > bestScore {
			best, bestScore = i, s
		}
	}
	return valid[best], true
}

// ExtraCorrectActions is the Options.Extra key that turns on action
// correction (value "jaccard", or "true"): an action outside the valid set
// is replaced by its most similar valid action (CorrectAction) before it is
// played, as the EMPO² recipe does on ScienceWorld. StepResult.Info then
// carries "corrected_from" with the original text.
const ExtraCorrectActions = "correct_actions"

// CorrectionEnabled reports whether opts turns action correction on.
func CorrectionEnabled(opts Options) bool {
	switch strings.ToLower(opts.Extra[ExtraCorrectActions]) {
	case "jaccard", "true", "1", "yes", "on":
		return true
	}
	return false
}
