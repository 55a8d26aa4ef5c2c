package trainer

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	_ "github.com/empo2/empo2/environments/scienceworld"
	"github.com/empo2/empo2/modelgen"
)

// fakeScienceWorld builds environments/scienceworld's test binary, which
// plays `java` for the scienceworld environment (FAKE_SCIENCEWORLD_JVM=
// gateway: it checks the JVM command line, prints a port and serves a fake
// py4j gateway with a scripted power-component world in which, as in the
// simulator, input it cannot parse costs no move), and returns the
// env_options that start it instead of a JVM.
func fakeScienceWorld(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	java := filepath.Join(dir, "fake-java")
	if out, err := exec.Command("go", "test", "-c", "-o", java, "../environments/scienceworld").CombinedOutput(); err != nil {
		t.Fatalf("building the fake java: %v\n%s", err, out)
	}
	jar := filepath.Join(dir, "scienceworld.jar")
	if err := os.WriteFile(jar, []byte("not really a jar"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_SCIENCEWORLD_JVM", "gateway")
	return []string{"env_options.jar=" + jar, "env_options.extra={java: " + java + "}"}
}

// TestScienceWorldWeakPolicy: an untrained (weak) policy on the fake
// ScienceWorld with the scienceworld preset. Without action correction its
// actions are invalid, cost no move and earn nothing: every episode runs
// until its context is full, every group keeps one score and no update
// runs — what a default run did before correction became ScienceWorld's
// default; metrics.jsonl says so in end_reasons. With the preset's
// defaults (correction on, the model's own 4096-token context) the
// corrected actions move the simulator: episodes end by the environment
// (done: completed, or a wrong focus at −100) or the step limit, their
// scores differ within groups, and the policy is updated.
func TestScienceWorldWeakPolicy(t *testing.T) {
	mcfg := modelgen.DefaultConfig()
	mcfg.Ctx = 4096
	model := filepath.Join(t.TempDir(), "tiny4k.gguf")
	if err := modelgen.Write(model, mcfg); err != nil {
		t.Fatal(err)
	}
	sets := append(fakeScienceWorld(t), "batch.tasks=2", "batch.rollouts=4", "tasks=[power-component]", "threads=1", "lora.rank=2",
		"lora.alpha=4", "update.micro_batch=4", "update.lr=0.01", "seed=3", "memory.write_tips=false", "mode.memory_prob=0",
		"update.low_prob_threshold=-20")
	run := func(extra ...string) map[string]any {
		t.Helper()
		cfg, err := LoadConfig("", "scienceworld", append(append([]string(nil), sets...), extra...))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Model, cfg.Steps = model, 1
		dir := filepath.Join(t.TempDir(), "run")
		if _, err := Train(context.Background(), RunOptions{Dir: dir, Config: cfg}); err != nil {
			t.Fatal(err)
		}
		m := readMetrics(t, dir)[0]
		t.Logf("%v: end_reasons %v, context %v, score_mean %v, zero_var_groups %v, updates %v", extra, m["end_reasons"], m["context"],
			m["score_mean"], m["zero_var_groups"], m["updates"])
		return m
	}
	ends := func(m map[string]any, e string) float64 { return m["end_reasons"].(map[string]any)[e].(float64) }

	// correction off (what a default run did), a 1024-token context
	off := run("rollout.correct_invalid=off", "context=1024")
	if off["context"].(float64) != 1024 || ends(off, "context") != 8 || off["score_mean"].(float64) != 0 ||
		off["zero_var_groups"].(float64) != 2 || off["updates"].(float64) != 0 {
		t.Fatalf("correction off: %v", off)
	}

	// the preset's defaults: correction on, the model's own context (10
	// steps of at most 8 tokens: the update of 30 steps of 32-token actions
	// takes minutes on a shared machine)
	on := run("rollout.step_limit=10", "rollout.max_action_tokens=8")
	if on["context"].(float64) != 4096 {
		t.Fatalf("context %v, want the model's 4096", on["context"])
	}
	if ends(on, "context") != 0 || ends(on, "done")+ends(on, "step-limit") != 8 {
		t.Fatalf("correction on: end reasons %v", on["end_reasons"])
	}
	if on["zero_var_groups"].(float64) == 2 || on["updates"].(float64) == 0 {
		t.Fatalf("correction on: no group with variance, or no update: %v", on)
	}
}
