package trainer

import (
	"path/filepath"

	"github.com/empo2/empo2/trainer/evaluate"
)

// LoadEvalConfig resolves `empo2 eval`'s configuration (evaluate.RunConfig)
// as LoadConfig resolves a run's: the defaults, the file (strict; "" =
// none), then the overrides. When the result names a run directory (its
// `run` key), the run's settings replace the defaults under the file and
// the overrides: its model, environment and options, tasks (a "task/N"
// of training stands for the task; not with ood, whose default is the
// held-out tasks), context, rollout and memory sections,
// and its memory.db as memory_db. So `eval --run DIR` evaluates what the
// run trained, as it played, and every key can still be set.
func LoadEvalConfig(file string, sets []string) (evaluate.RunConfig, error) {
	raw, err := evaluate.ReadRunConfigFile(file)
	if err != nil {
		return evaluate.RunConfig{}, err
	}
	apply := func(c evaluate.RunConfig) (evaluate.RunConfig, error) {
		return c, evaluate.ApplyRunConfig(&c, raw, file, sets)
	}
	c, err := apply(evaluate.DefaultRunConfig())
	if err != nil || c.Run == "" {
		return c, err
	}
	run, err := LoadRunConfig(c.Run, nil)
	if err != nil {
		return c, err
	}
	return apply(EvalDefaults(c.Run, run, c.OOD))
}

// EvalDefaults is the eval configuration of run directory dir whose
// configuration is run: evaluate.DefaultRunConfig with the run's model,
// environment, tasks (unless ood, which plays held-out tasks), context,
// rollout and memory sections and memory.
func EvalDefaults(dir string, run Config, ood bool) evaluate.RunConfig {
	c := evaluate.DefaultRunConfig()
	c.Run = dir
	c.Model, c.Env, c.EnvOptions = run.Model, run.Env, run.EnvOptions
	if !ood {
		c.Tasks = evaluate.TaskNames(run.Tasks)
	}
	c.Context = run.Context
	c.Rollout, c.Memory = run.Rollout, run.Memory
	c.MemoryDB = filepath.Join(dir, MemoryFile)
	return c
}
