package evaluate

import (
	"context"
	"fmt"
	"strings"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/llama"
	"github.com/empo2/empo2/trainer/rollout"
)

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

// GreedyEpisode plays one episode with greedy decoding (temperature 0): at
// every step the chat (rollout.Messages, no tips) is rendered by r, the model
// continues it, and rollout.ParseAction's action is sent to the environment. A
// response without an action ends the episode. Success = done and score >
// successScore (the EMPO² recipe's ScienceWorld rule uses 70; textlab's
// complete episodes score 100).
func GreedyEpisode(ctx context.Context, lc *llama.Context, r *rollout.Renderer, env environments.Env, task string, variation, stepLimit int, successScore float64) (GreedyResult, error) {
	res := GreedyResult{Task: task, Variation: variation}
	pc := r.Config()
	rr, err := env.Reset(ctx, task, variation, 0)
	if err != nil {
		return res, err
	}
	var turns []rollout.Turn
	for step := 0; stepLimit <= 0 || step < stepLimit; step++ {
		ct, err := r.Tokens(rollout.Messages(pc, rr.TaskDescription, rr.Observation, turns, ""), true)
		if err != nil {
			return res, err
		}
		if len(ct.Tokens)+pc.MaxActionTokens > lc.NCtxSeq() {
			break // the context is full: the episode ends where it is
		}
		seqs, err := lc.Generate(ctx, ct.Tokens, llama.SampleParams{N: 1, MaxTokens: pc.MaxActionTokens, Temperature: 0})
		if err != nil {
			return res, fmt.Errorf("%s/%d step %d: %w", task, variation, step+1, err)
		}
		text := strings.TrimSpace(seqs[0].Text)
		action, ok := rollout.ParseAction(pc, text)
		if !ok {
			break
		}
		sr, err := env.Step(ctx, action)
		if err != nil {
			return res, err
		}
		res.Actions = append(res.Actions, action)
		res.Steps++
		turns = append(turns, rollout.Turn{Action: text, Observation: sr.Observation})
		if sr.Done {
			res.Done = true
			break
		}
	}
	res.Score = env.Score()
	res.Success = res.Done && res.Score > successScore
	return res, nil
}
