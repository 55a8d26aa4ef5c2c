package rollout

// What the rollout engine plays and returns: jobs, episodes and their step
// records, end reasons, and the engine's counters.

import (
	"fmt"
	"strconv"
	"time"

	"github.com/empo2/empo2/algo"
	"github.com/empo2/empo2/runfiles"
)

// Job is one episode to play.
type Job struct {
	Task      string
	Variation int
	Group     int       // GRPO group (the caller's numbering)
	Seed      int64     // sampling seed of the episode (with Options.Seed); also the env reset seed
	Mode      algo.Mode // EMPO² mode: memory modes (Mode.Memory) retrieve tips before every action
}

// Namespace is the memory namespace of a job: "task/variation".
func (j Job) Namespace() string { return j.Task + "/" + strconv.Itoa(j.Variation) }

// StepRecord is one action of an episode.
type StepRecord struct {
	Prompt []int32 // tokens the policy saw (its tip blocks included)
	// NoTips is the same chat rendered with no tips at all, tokenized on its
	// own (the off-policy training input); nil when Prompt has no tips.
	NoTips      []int32
	TipSpans    [][2]int  // token spans of Prompt's tip blocks (ChatTokens.Tips)
	Tips        string    // the tip block retrieved for this action ("" none)
	Response    []int32   // sampled tokens, incl. a final end-of-generation token unless cut by max_action_tokens
	OldLogp     []float32 // raw log-probs of Response at temperature 1 (π_old)
	Text        string    // the response's text (without the end-of-generation token)
	Action      string    // the action sent to the environment (after parsing / correction)
	Observation string
	Reward      float64 // environment reward of this step (score change)
	Retrieved   int     // tips put in the prompt for this action (≤ memory.top_k)
	Intrinsic   float64 // novelty bonus of this step in score points: memory episodes algo.IntrinsicReward(Retrieved, coef), else 0
	Key         string  // the retrieval key text of this step's context
	Parsed      bool    // the response contained a well-formed action
	Corrected   bool    // the action was mapped to a valid one
}

// PromptWithoutTips is the prompt with no tips: NoTips, or Prompt when it
// had none.
func (s StepRecord) PromptWithoutTips() []int32 {
	if s.NoTips != nil {
		return s.NoTips
	}
	return s.Prompt
}

// Episode is a finished episode.
type Episode struct {
	Job
	Steps     []StepRecord
	Score     float64 // final environment score
	Success   bool    // Succeeded(Score, Config.SuccessScore)
	Done      bool    // the environment ended the episode (not the step limit or the context)
	Intrinsic float64 // memory episodes: mean over steps of StepRecord.Intrinsic (score points); else 0
	Tip       string  // set by WriteTips
	End       End     // why the episode ended
	Err       string  // End == EndError: what failed

	// TaskDesc and FirstObs are what the environment's reset gave: the
	// first user message's text (Messages).
	TaskDesc, FirstObs string

	slot int
}

// End is why an episode ended.
type End string

// Episode ends.
const (
	EndDone      End = "done"       // the environment ended it
	EndStepLimit End = "step-limit" // it reached its step limit
	EndContext   End = "context"    // the next prompt and action would not fit the context
	// EndError: the environment failed (its simulator died); the episode
	// keeps the steps it played, carries no training signal (trainer
	// leaves it out of its GRPO group) and its instance is replaced.
	EndError End = "error"
)

// Ends lists the end reasons in their reporting order.
var Ends = []End{EndDone, EndStepLimit, EndContext, EndError}

// EndCounts counts episodes by end reason (the run files' end_reasons,
// keyed by End's text).
type EndCounts = runfiles.EndCounts

// CountEnds counts eps by end reason; every reason is present (0 when
// none ended so).
func CountEnds(eps []Episode) EndCounts {
	c := EndCounts{}
	for _, e := range Ends {
		c[string(e)] = 0
	}
	for i := range eps {
		c[string(eps[i].End)]++
	}
	return c
}

// ContextWarning is a warning when most episodes (more than half) ended
// because their context was full ("" otherwise): such episodes neither
// finish nor fail, so with a weak policy every episode of a group keeps
// the same score and the group carries no training signal. context is the
// per-episode context in tokens.
func ContextWarning(c EndCounts, context int) string {
	n, all := c[string(EndContext)], c.Total()
	if all == 0 || 2*n <= all {
		return ""
	}
	return fmt.Sprintf("%d of %d episodes ended on a full context (%d tokens) before the environment or the step limit ended them: "+
		"raise context (up to the model's training context) or keep fewer turns (rollout.history: last-k); with rollout.correct_invalid off, "+
		"an invalid action does not advance the episode", n, all, context)
}

// Stats describes a Run (or, for TTips, a WriteTips).
// PromptTokensSeen sums every prompt's length (what the policy read);
// PromptTokensDecoded is what llama.cpp decoded (the rest came from the
// episodes' KV); PromptTokensUnique counts each episode's distinct prompt
// tokens: per turn, the prompt's tokens that the previous prompt and
// response did not already hold at the same positions (after a tip block,
// the rest of the history). Decoded/Unique ≈ 1 is perfect reuse (below 1
// when a slot's next episode shares the system prompt); without reuse it
// is ≈ T/2 for T turns.
type Stats struct {
	Episodes, EnvSteps, GenTokens, PromptTokensSeen, PromptTokensDecoded int
	PromptTokensUnique                                                   int
	TRollout, TEmbedRetrieve, TTips                                      time.Duration
}

// Add accumulates o into s.
func (s *Stats) Add(o Stats) {
	s.Episodes += o.Episodes
	s.EnvSteps += o.EnvSteps
	s.GenTokens += o.GenTokens
	s.PromptTokensSeen += o.PromptTokensSeen
	s.PromptTokensDecoded += o.PromptTokensDecoded
	s.PromptTokensUnique += o.PromptTokensUnique
	s.TRollout += o.TRollout
	s.TEmbedRetrieve += o.TEmbedRetrieve
	s.TTips += o.TTips
}
