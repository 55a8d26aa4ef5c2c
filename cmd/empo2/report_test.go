package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTinyRun writes a small run directory as `empo2 train` does
// (config.yaml, metrics.jsonl, eval.jsonl).
func writeTinyRun(t *testing.T, dir string, seed int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("preset: empo2\nseed: %d\nsteps: 4\n", seed)
	var m strings.Builder
	for s := 1; s <= 4; s++ {
		fmt.Fprintf(&m, `{"step":%d,"mode":"on-policy","seed":%d,"score_mean":%d,"success_rate":0.%d,"loss":0.1,"t_rollout":1.5,"t_update":0.5}`+"\n", s, seed, 10*s+seed, s)
	}
	for name, body := range map[string]string{"config.yaml": cfg, "metrics.jsonl": m.String(),
		"eval.jsonl": `{"step":4,"memory_off":{"score_mean":30,"success_rate":0.2,"episodes":4},"memory_on":{"score_mean":40,"success_rate":0.3,"episodes":4}}` + "\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReportCLI(t *testing.T) {
	dir := t.TempDir()
	r1, r2 := filepath.Join(dir, "run-s1"), filepath.Join(dir, "run-s2")
	writeTinyRun(t, r1, 1)
	writeTinyRun(t, r2, 2)
	out := filepath.Join(dir, "report")
	stdout, stderr, err := runCLI(t, "report", r1, r2, "--out", out, "--format", "png")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, "report.html") {
		t.Errorf("stdout %q does not name report.html", stdout)
	}
	html, err := os.ReadFile(filepath.Join(out, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`src="curve-score_mean.png"`, "run (2 seeds)", `id="periodic-eval"`} {
		if !strings.Contains(string(html), want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "overview.svg")); err == nil {
		t.Error("--format png wrote an SVG")
	}

	// Errors: no run, a corrupt metrics line (named by file and line), a bad format.
	if _, stderr, err := runCLI(t, "report", "--out", out); err == nil || !strings.Contains(stderr, "run directory") {
		t.Errorf("no run: err %v, stderr %q", err, stderr)
	}
	bad := filepath.Join(dir, "bad")
	writeTinyRun(t, bad, 3)
	if err := os.WriteFile(filepath.Join(bad, "metrics.jsonl"), []byte("{\"step\":1}\n{\"step\":2,\n{\"step\":3}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := runCLI(t, "report", bad, "--out", out); err == nil || !strings.Contains(stderr, "metrics.jsonl:2") {
		t.Errorf("corrupt line: err %v, stderr %q", err, stderr)
	}
	if _, stderr, err := runCLI(t, "report", r1, "--out", out, "--format", "gif"); err == nil || !strings.Contains(stderr, "gif") {
		t.Errorf("bad format: err %v, stderr %q", err, stderr)
	}
}
