package trainer

import (
	"context"
	"os"

	"github.com/empo2/empo2/internal/watch"
	"github.com/empo2/empo2/trainer/evaluate"
	"github.com/empo2/empo2/trainer/rollout"
)

func appendEvalLine(path string, line evaluate.Line) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	return appendJSONL(f, line)
}

// periodicEval evaluates the current policy after step (evaluate.Periodic):
// the eval section on the run's tasks, with a seed drawn from (seed, step)
// so that a resumed run evaluates exactly as an uninterrupted one.
func periodicEval(ctx context.Context, r *rollout.Roller, cfg *Config, step int) (evaluate.Line, error) {
	ec := cfg.Eval
	ec.Tasks = cfg.Tasks
	ec.Seed = int64(stepRNG(cfg.Seed, step, streamEval).Uint64() >> 1)
	ec.Plan = func(p evaluate.Plan) { watch.From(ctx).Phase(watch.Eval, p.Total) }
	return evaluate.Periodic(ctx, r, ec, step)
}
