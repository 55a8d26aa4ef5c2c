package evaluate

import (
	"context"
	"time"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/runfiles"
	"github.com/empo2/empo2/trainer/rollout"
)

// Line is one line of a run's eval.jsonl (the run-files record
// runfiles.EvalLine): the periodic evaluation after step Step, with memory
// off and on (absent when eval.memory excludes it).
type Line = runfiles.EvalLine

// Periodic runs a training run's periodic evaluation after step: Evaluate
// on cfg.Split of cfg.Tasks (a name "task/N", which trains one variation,
// stands for the task: eval takes the task's split), the first
// cfg.MaxVariations variations of each, memory per cfg.Memory, at
// cfg.Temperature; the memory is read only. The caller derives cfg.Seed
// from (run seed, step) so that a resumed run evaluates exactly as an
// uninterrupted one.
func Periodic(ctx context.Context, r *rollout.Roller, cfg Config, step int) (Line, error) {
	line := Line{Step: step}
	split, err := environments.ParseSplit(string(cfg.Split))
	if err != nil {
		return line, err
	}
	cfg.Tasks, cfg.Split = TaskNames(cfg.Tasks), split
	rep, err := Evaluate(ctx, r, cfg)
	if err != nil {
		return line, err
	}
	line.MemoryOff, line.MemoryOn = rep.MemoryOff, rep.MemoryOn
	line.Time = time.Now().UTC().Format(time.RFC3339)
	return line, nil
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}
