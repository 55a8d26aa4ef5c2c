package trainer

import (
	"context"
	"encoding/json"
	"os"
)

// EvalLine is one line of eval.jsonl: the periodic evaluation after step
// Step, with memory off and on (each issue 12.1's JSON object; absent when
// eval.memory excludes it).
type EvalLine struct {
	Step      int             `json:"step"`
	Time      string          `json:"time"`
	MemoryOff json.RawMessage `json:"memory_off,omitempty"`
	MemoryOn  json.RawMessage `json:"memory_on,omitempty"`
}

func appendEvalLine(path string, line EvalLine) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	return appendJSONL(f, line)
}

// periodicEval evaluates the current policy on cfg.Eval.Split (see
// run_evaluate.go).
func periodicEval(ctx context.Context, r *Roller, cfg *Config, step int) (EvalLine, error) {
	return evaluateAt(ctx, r, cfg, step)
}
