package trainer

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/empo2/empo2/environments"
)

// evaluateAt runs the periodic evaluation after step (issue 12.4):
// Evaluate on cfg.Eval.Split of the run's tasks, the first
// eval.max_variations variations of each, memory per eval.memory, at
// eval.temperature; the memory is read only. Seeds derive from (seed,
// step) so a resumed run evaluates exactly as an uninterrupted one.
func evaluateAt(ctx context.Context, r *Roller, cfg *Config, step int) (EvalLine, error) {
	line := EvalLine{Step: step}
	split, err := environments.ParseSplit(cfg.Eval.Split)
	if err != nil {
		return line, err
	}
	var tasks []string
	for _, t := range cfg.Tasks { // "task/N" trains one variation; eval takes the task's split
		name := strings.TrimSpace(t)
		if i := strings.LastIndex(name, "/"); i > 0 {
			name = name[:i]
		}
		if !contains(tasks, name) {
			tasks = append(tasks, name)
		}
	}
	ec := EvalConfig{Tasks: tasks, Split: split, Episodes: cfg.Eval.Episodes, MaxVariations: cfg.Eval.MaxVariations,
		Memory: cfg.Eval.Memory, Temperature: cfg.Eval.Temperature, Seed: int64(stepRNG(cfg.Seed, step, streamEval).Uint64() >> 1)}
	rep, err := Evaluate(ctx, r, ec)
	if err != nil {
		return line, err
	}
	if rep.MemoryOff != nil {
		line.MemoryOff, _ = json.Marshal(rep.MemoryOff)
	}
	if rep.MemoryOn != nil {
		line.MemoryOn, _ = json.Marshal(rep.MemoryOn)
	}
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
