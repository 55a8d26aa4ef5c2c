package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/empo2/empo2/trainer/presets"
)

// A new user's first two commands: `model init --out m.gguf` on its
// defaults, then `train --preset P -m m.gguf --env textlab` on every
// preset's default tasks (all of textlab's training tasks) — train checks
// every task's first prompt against the context before it starts, so each
// run here must start (issue 38 §3). The batch and the episodes are cut
// short (they do not change the first prompts). The old 512-token default
// is refused, which shows the check bites.
func TestModelInitFitsPresets(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m.gguf")
	if out, stderr, err := runCLI(t, "model", "init", "--out", model); err != nil || !strings.Contains(out, "ctx 2048") {
		t.Fatalf("model init: %v\n%s\n%s", err, out, stderr)
	}
	short := []string{"--steps", "1", "--threads", "1", "--set", "batch.tasks=1", "--set", "batch.rollouts=2", "--set", "rollout.step_limit=2"}
	for _, p := range presets.Names() {
		args := append([]string{"train", "--preset", p, "-m", model, "--env", "textlab", "--run-dir", filepath.Join(dir, "run-"+p)}, short...)
		if out, stderr, err := runCLI(t, args...); err != nil || !strings.Contains(out, "trained steps 1..1") {
			t.Errorf("train --preset %s on model init's default model: %v\n%s\n%s", p, err, out, stderr)
		}
	}
	small := filepath.Join(dir, "small.gguf")
	if _, stderr, err := runCLI(t, "model", "init", "--out", small, "--ctx", "512"); err != nil {
		t.Fatalf("model init --ctx 512: %v\n%s", err, stderr)
	}
	args := append([]string{"train", "--preset", "empo2", "-m", small, "--env", "textlab", "--run-dir", filepath.Join(dir, "small")}, short...)
	if _, stderr, err := runCLI(t, args...); err == nil || !strings.Contains(stderr, "cannot hold the first prompt") {
		t.Errorf("a 512-token model was not refused: %v\n%s", err, stderr)
	}
}
