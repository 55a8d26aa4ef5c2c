package trainer

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/empo2/empo2/environments"
	"github.com/empo2/empo2/trainer/presets"
	"github.com/empo2/empo2/trainer/rollout"
)

var updateDoc = flag.Bool("update-doc", false, "rewrite the configuration table of docs/train.md")

// TestConfigDocsMatch: every key of Config (every field with a yaml name,
// found by reflection) is documented by its doc tag, and every documented
// key is a field (one place for every hyperparameter); the docs/train.md
// table is ConfigReference verbatim.
func TestConfigDocsMatch(t *testing.T) {
	keys := schema.Fields()
	seen := map[string]bool{}
	for _, k := range keys {
		seen[k] = true
		if ConfigDoc(k) == "" {
			t.Errorf("key %q has no documentation (doc tag)", k)
		}
	}
	for _, k := range ConfigKeys() {
		if !seen[k] {
			t.Errorf("key %q is documented but is not a field of Config", k)
		}
	}
	const path = "../docs/train.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- config-reference:begin -->\n", "<!-- config-reference:end -->"
	i, j := strings.Index(string(doc), begin), strings.Index(string(doc), end)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the config-reference markers", path)
	}
	want := string(doc[:i+len(begin)]) + ConfigReference() + string(doc[j:])
	if *updateDoc {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	} else if want != string(doc) {
		t.Errorf("docs/train.md's table is not the current ConfigReference(); regenerate it: go test ./trainer -run TestConfigDocsMatch -update-doc")
	}
}

func TestPresets(t *testing.T) {
	for _, name := range presets.Names() {
		c, err := LoadConfig("", name, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		switch name {
		case "empo2":
			if c.Mode.MemoryProb != 0.25 || c.Mode.OffPolicyProb != 0.68 || !c.Mode.Update {
				t.Errorf("empo2: %+v", c.Mode)
			}
		case "grpo":
			if c.Mode.MemoryProb != 0 || c.Memory.WriteTips {
				t.Errorf("grpo: %+v %+v", c.Mode, c.Memory)
			}
		case "memory-only":
			if c.Mode.MemoryProb != 1 || c.Mode.Update || !c.Memory.WriteTips {
				t.Errorf("memory-only: %+v", c.Mode)
			}
		case "scienceworld":
			// the EMPO² recipe: empo2's modes, easy, corrected actions, the
			// environment's per-task step limits, an automatic context
			if c.Env != "scienceworld" || c.EnvOptions.Simplifications != "easy" || c.Rollout.CorrectInvalid != rollout.CorrectOn ||
				c.Rollout.StepLimit != 0 || c.EnvOptions.StepLimit != 0 || c.Context != 0 ||
				c.Mode.MemoryProb != 0.25 || c.Mode.OffPolicyProb != 0.68 || !c.Mode.Update || !c.Memory.WriteTips {
				t.Errorf("scienceworld: %+v", c)
			}
		}
	}
	if _, err := LoadConfig("", "nope", nil); !errors.Is(err, ErrRunConfig) || !strings.Contains(err.Error(), "memory-only") {
		t.Fatalf("unknown preset: %v", err)
	}
}

// TestConfigStrict: an unknown key is an error naming the key and its line;
// the file's preset applies under the file; --set overrides; print-config
// round-trips.
func TestConfigStrict(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "c.yaml")
	os.WriteFile(f, []byte("preset: grpo\nsteps: 7\nupdate:\n  lr: 0.001\n  lerning_rate: 3\n"), 0o644)
	_, err := LoadConfig(f, "", nil)
	if !errors.Is(err, ErrRunConfig) || !strings.Contains(err.Error(), "lerning_rate") || !strings.Contains(err.Error(), "line 5") {
		t.Fatalf("want an error naming lerning_rate at line 5, got %v", err)
	}
	os.WriteFile(f, []byte("preset: grpo\nsteps: 7\nupdate:\n  lr: 0.001\n"), 0o644)
	c, err := LoadConfig(f, "", []string{"batch.tasks=3", "tasks=[a, b]", "mode.per=rollout"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Preset != "grpo" || c.Mode.MemoryProb != 0 || c.Steps != 7 || c.Update.LR != 0.001 || c.Batch.Tasks != 3 ||
		len(c.Tasks) != 2 || c.Tasks[1] != "b" || c.Mode.Per != "rollout" {
		t.Fatalf("resolved config %+v", c)
	}
	c2, _ := LoadConfig(f, "empo2", nil) // --preset beats the file's preset key
	if c2.Mode.MemoryProb != 0.25 || c2.Steps != 7 {
		t.Fatalf("--preset empo2 over a grpo file: %+v", c2.Mode)
	}
	for _, bad := range []string{"batch.taks=3", "nokey", "batch.tasks=[1", "batch.tasks=abc"} {
		if err := c.Set(bad); !errors.Is(err, ErrRunConfig) {
			t.Errorf("--set %s: %v", bad, err)
		}
	}
	var buf bytes.Buffer
	if err := PrintConfig(&buf, c); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "# "+ConfigDoc("mode.offpolicy_prob")) || !strings.Contains(buf.String(), "(default 0.25)") {
		t.Fatalf("print-config lacks documentation:\n%s", buf.String())
	}
	var back Config
	d := yaml.NewDecoder(&buf)
	d.KnownFields(true)
	if err := d.Decode(&back); err != nil {
		t.Fatal(err)
	}
	if back.Batch != c.Batch || back.Update != c.Update || back.Mode != c.Mode || back.Steps != c.Steps {
		t.Fatalf("print-config round trip: %+v vs %+v", back, c)
	}
	c.Mode.MemoryProb = 1.5
	if err := c.Validate(); !errors.Is(err, ErrRunConfig) {
		t.Fatalf("p = 1.5 accepted: %v", err)
	}
	c.Mode.MemoryProb = 0.25
	// rollout.tip_temperature: default −1 (the rollout temperature), the
	// rollout engine's own default (the section is its configuration);
	// above 100 refused
	if d := DefaultConfig(); d.Rollout.TipTemperature != -1 || rollout.DefaultConfig().TipTemperature != -1 {
		t.Fatalf("default tip temperature %v", d.Rollout.TipTemperature)
	}
	if err := c.Set("rollout.tip_temperature=0"); err != nil || c.Rollout.TipTemperature != 0 {
		t.Fatalf("--set rollout.tip_temperature=0: %v, %v", err, c.Rollout.TipTemperature)
	}
	c.Rollout.TipTemperature = 101
	if err := c.Validate(); !errors.Is(err, ErrRunConfig) || !strings.Contains(err.Error(), "tip_temperature") {
		t.Fatalf("tip_temperature 101 accepted: %v", err)
	}
}

// TestPlanStepModes: the empirical frequencies of PlanStep's per-step draws
// (algo.DrawMode's thresholds 0.17 and 0.25), every job carrying its mode.
func TestPlanStepModes(t *testing.T) {
	cfg := DefaultConfig()
	pool := []TaskVar{{"a", 0}, {"a", 1}, {"b", 0}}
	counts := map[Mode]int{}
	const n = 20000
	for s := 1; s <= n; s++ {
		jobs := PlanStep(&cfg, pool, s)
		if len(jobs) != cfg.Batch.Tasks*cfg.Batch.Rollouts {
			t.Fatal(len(jobs))
		}
		for _, j := range jobs {
			if j.Mode != jobs[0].Mode {
				t.Fatal("per-step mode differs within a step")
			}
		}
		counts[jobs[0].Mode]++
	}
	for m, p := range map[Mode]float64{ModeOffPolicy: 0.17, ModeOnPolicyTips: 0.08, ModeOnPolicy: 0.75} {
		if got := float64(counts[m]) / n; got < p-0.015 || got > p+0.015 {
			t.Errorf("mode %s frequency %.3f, want %.2f", m, got, p)
		}
	}
	// Same (seed, step): same plan; another step: another plan.
	j1 := PlanStep(&cfg, pool, 5)
	j2 := PlanStep(&cfg, pool, 5)
	j3 := PlanStep(&cfg, pool, 6)
	if j1[0] != j2[0] || j1[0].Seed == j3[0].Seed {
		t.Fatal("plans are not a function of (seed, step)")
	}
	cfg.Mode.Per = PerRollout
	mixed := false
	for s := 1; s < 50 && !mixed; s++ {
		jobs := PlanStep(&cfg, pool, s)
		for _, j := range jobs {
			mixed = mixed || j.Mode != jobs[0].Mode
		}
	}
	if !mixed {
		t.Fatal("mode.per rollout never mixed modes within a step")
	}
}

// TestCorrectInvalidSetting: rollout.correct_invalid defaults to auto (the
// environment decides), takes auto, on and off, and still reads the
// booleans of configurations written before it had an automatic setting.
func TestCorrectInvalidSetting(t *testing.T) {
	if d := DefaultConfig(); d.Rollout.CorrectInvalid != rollout.CorrectAuto {
		t.Fatalf("default %q, want auto", d.Rollout.CorrectInvalid)
	}
	for in, want := range map[string]rollout.Correction{"false": rollout.CorrectOff, "true": rollout.CorrectOn, "auto": rollout.CorrectAuto,
		"on": rollout.CorrectOn, `"on"`: rollout.CorrectOn, "off": rollout.CorrectOff, "Off": rollout.CorrectOff} {
		c := DefaultConfig()
		if err := c.Set("rollout.correct_invalid=" + in); err != nil || c.Rollout.CorrectInvalid != want {
			t.Errorf("correct_invalid=%s: %q, %v; want %q", in, c.Rollout.CorrectInvalid, err, want)
		}
		var buf bytes.Buffer
		if err := PrintConfig(&buf, c); err != nil {
			t.Fatal(err)
		}
		back, err := LoadConfig(writeTemp(t, buf.Bytes()), "", nil)
		if err != nil || back.Rollout.CorrectInvalid != want {
			t.Errorf("correct_invalid=%s after print-config: %q, %v", in, back.Rollout.CorrectInvalid, err)
		}
	}
	c := DefaultConfig()
	for _, bad := range []string{"maybe", "1", "[on]", `""`} {
		if err := c.Set("rollout.correct_invalid=" + bad); !errors.Is(err, ErrRunConfig) {
			t.Errorf("correct_invalid=%s accepted: %v", bad, err)
		}
	}
	off := rollout.CorrectOff
	if off.Enabled(environments.Defaults{CorrectActions: true}) || !rollout.CorrectOn.Enabled(environments.Defaults{}) ||
		!rollout.CorrectAuto.Enabled(environments.Defaults{CorrectActions: true}) || rollout.CorrectAuto.Enabled(environments.Defaults{}) {
		t.Fatal("Correction.Enabled")
	}
}

func writeTemp(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEpisodeContext: context 0 is the model's training context up to
// MaxAutoContext (a 4096-token model gets 4096, not 2048); a set context
// is kept, and cut to the training context.
func TestEpisodeContext(t *testing.T) {
	c := DefaultConfig()
	if c.Context != 0 {
		t.Fatalf("default context %d, want 0 (the model's)", c.Context)
	}
	for _, tc := range []struct{ set, train, want int }{
		{0, 4096, 4096}, {0, 512, 512}, {0, 32768, MaxAutoContext}, {0, 0, 2048},
		{2048, 4096, 2048}, {8192, 4096, 4096}, {3000, 0, 3000},
	} {
		c.Context = tc.set
		if got := c.EpisodeContext(tc.train); got != tc.want {
			t.Errorf("context %d with a %d-token model: %d, want %d", tc.set, tc.train, got, tc.want)
		}
	}
	c.Context = 0
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.Context = 32
	if err := c.Validate(); !errors.Is(err, ErrRunConfig) {
		t.Fatalf("context 32 accepted: %v", err)
	}
}
