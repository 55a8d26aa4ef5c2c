package evaluate

import "github.com/empo2/empo2/trainer/rollout"

// GreedyResult is one greedily played episode.
type GreedyResult struct {
	Task      string   `json:"task"`
	Variation int      `json:"variation"`
	Score     float64  `json:"score"`
	Done      bool     `json:"done"`
	Success   bool     `json:"success"`
	Steps     int      `json:"steps"`
	Actions   []string `json:"actions,omitempty"`
}

// GreedySummary aggregates GreedyResults of one task (or all).
type GreedySummary struct {
	Task      string  `json:"task"`
	Episodes  int     `json:"episodes"`
	Successes int     `json:"successes"`
	Success   float64 `json:"success"` // fraction
	MeanScore float64 `json:"mean_score"`
}

// SummarizeGreedy groups results by task; the last entry is "all".
func SummarizeGreedy(rs []GreedyResult) []GreedySummary {
	idx := map[string]int{}
	var out []GreedySummary
	add := func(i int, r GreedyResult) {
		out[i].Episodes++
		out[i].MeanScore += r.Score
		if r.Success {
			out[i].Successes++
		}
	}
	for _, r := range rs {
		i, ok := idx[r.Task]
		if !ok {
			i = len(out)
			idx[r.Task] = i
			out = append(out, GreedySummary{Task: r.Task})
		}
		add(i, r)
	}
	out = append(out, GreedySummary{Task: "all"})
	for _, r := range rs {
		add(len(out)-1, r)
	}
	for i := range out {
		if out[i].Episodes > 0 {
			out[i].Success = float64(out[i].Successes) / float64(out[i].Episodes)
			out[i].MeanScore /= float64(out[i].Episodes)
		}
	}
	return out
}

// GreedyResults are the episodes of a greedy evaluation (`empo2 sft
// eval`: Run at eval.temperature 0, memory off, one episode per
// variation) in play order: the rollout engine's episodes (rollout.Roller
// at temperature 0 is greedy decoding), success by its rule
// (rollout.Succeeded).
func GreedyResults(eps []rollout.Episode) []GreedyResult {
	out := make([]GreedyResult, len(eps))
	for i, ep := range eps {
		r := GreedyResult{Task: ep.Task, Variation: ep.Variation, Score: ep.Score, Done: ep.Done, Success: ep.Success, Steps: len(ep.Steps)}
		for _, s := range ep.Steps {
			r.Actions = append(r.Actions, s.Action)
		}
		out[i] = r
	}
	return out
}
