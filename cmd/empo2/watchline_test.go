package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/empo2/empo2/internal/progress"
	"github.com/empo2/empo2/internal/watch"
)

// The phases a training step reports are progress.json's phases.
func TestWatchPhasesAreProgressPhases(t *testing.T) {
	for _, p := range []string{watch.Rollouts, watch.Tips, watch.OldLogp, watch.Update, watch.Eval, watch.Checkpoint, watch.Done} {
		if !slices.Contains(progress.Phases, p) {
			t.Errorf("phase %q is not one of progress.json's %v", p, progress.Phases)
		}
	}
}

// Off a terminal, train logs one structured line per phase end (with the
// step, episodes, tokens/s and the run's ETA) and keeps progress.json,
// "done" at the end.
func TestTrainPhaseLogLines(t *testing.T) {
	model := trainModel(t)
	run := filepath.Join(t.TempDir(), "r")
	_, stderr, err := runCLI(t, "--log-format", "json", "train", "--preset", "empo2", "-m", model, "--env", "textlab", "--tasks", "melt",
		"--run-dir", run, "--steps", "2", "--threads", "1", "--set", "batch.tasks=1", "--set", "batch.rollouts=2",
		"--set", "rollout.step_limit=3", "--set", "eval.every=2", "--set", "eval.max_variations=1")
	if err != nil {
		t.Fatalf("train: %v\n%s", err, stderr)
	}
	type line struct {
		Msg        string  `json:"message"`
		Phase      string  `json:"phase"`
		Step       int     `json:"step"`
		Steps      int     `json:"steps"`
		Done       int     `json:"done"`
		Total      int     `json:"total"`
		Tokens     int     `json:"tokens"`
		TokensPerS float64 `json:"tokens_per_s"`
		Took       string  `json:"took"`
		ETARun     string  `json:"eta_run"`
	}
	var phases []string
	sc := bufio.NewScanner(strings.NewReader(stderr))
	for sc.Scan() {
		var l line
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Msg != "phase done" {
			continue
		}
		phases = append(phases, fmt.Sprintf("%d:%s", l.Step, l.Phase))
		if l.Took == "" || l.Steps != 2 {
			t.Errorf("phase line %s lacks took or steps", sc.Text())
		}
		if l.Phase == watch.Rollouts && (l.Done != 2 || l.Total != 2 || l.Tokens == 0 || l.TokensPerS <= 0 || l.ETARun == "") {
			t.Errorf("rollouts line %s: want 2 of 2 episodes, tokens, tokens/s and the run's ETA", sc.Text())
		}
	}
	want := []string{"1:rollouts", "1:tips", "1:old_logp", "1:update", "1:checkpoint",
		"2:rollouts", "2:tips", "2:old_logp", "2:update", "2:eval", "2:checkpoint"}
	if !slices.Equal(phases, want) {
		t.Errorf("phase lines %v, want %v\n%s", phases, want, stderr)
	}
	p, err := progress.ReadFile(run)
	if err != nil || p.Phase != progress.PhaseDone || p.Step != 2 {
		t.Errorf("progress.json %+v, %v: want phase done at step 2", p, err)
	}
}

// On a terminal (tmux), the progress bar's line shows the step, the phase,
// the episodes done, tokens/s and the ETAs while a step runs, for train
// and for eval.
func TestProgressLineUnderTmux(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux is not installed (apt-get install tmux; .ci/run installs it)")
	}
	model := trainModel(t)
	dir := t.TempDir()
	sock := fmt.Sprintf("empo2-test-%d", os.Getpid())
	t.Cleanup(func() { _ = exec.Command(tmux, "-L", sock, "kill-server").Run() })
	// screens runs cmdline in a new tmux window and returns every distinct
	// screen until done appears in it
	screens := func(name, cmdline, done string) []string {
		t.Helper()
		if out, err := exec.Command(tmux, "-L", sock, "new-session", "-d", "-s", name, "-x", "230", "-y", "40",
			"bash", "-c", cmdline+"; echo "+done+"; sleep 600").CombinedOutput(); err != nil {
			t.Fatalf("tmux: %v %s", err, out)
		}
		var seen []string
		deadline := time.Now().Add(5 * time.Minute)
		for time.Now().Before(deadline) {
			out, err := exec.Command(tmux, "-L", sock, "capture-pane", "-p", "-t", name).Output()
			if err != nil {
				t.Fatalf("capture-pane: %v", err)
			}
			s := string(out)
			if len(seen) == 0 || seen[len(seen)-1] != s {
				seen = append(seen, s)
			}
			if strings.Contains(s, done) && strings.Contains(s, "\n"+done) {
				return seen
			}
			time.Sleep(40 * time.Millisecond)
		}
		t.Fatalf("%s did not finish; last screen:\n%s", name, seen[len(seen)-1])
		return nil
	}
	run := filepath.Join(dir, "r")
	got := screens("train", fmt.Sprintf("%s train --preset empo2 -m %s --env textlab --tasks melt,light-bulb --run-dir %s --steps 3 --threads 1",
		binPath, model, run), "TRAIN-EXITED")
	line := regexp.MustCompile(`step [123]/3 rollouts \d/8 · [\d.]+ tok/s · step ETA ≥?\d+(s|m\d\ds) · run ETA ≥?\d+(s|m\d\ds)`)
	phases := map[string]bool{}
	for _, s := range got {
		if line.MatchString(s) {
			phases["rollouts"] = true
		}
		for _, p := range []string{"tips", "π_old", "update", "checkpoint"} {
			if regexp.MustCompile(`step [123]/3 ` + p + `\b`).MatchString(s) {
				phases[p] = true
			}
		}
	}
	if !phases["rollouts"] {
		t.Errorf("no screen showed the rollouts line (step, episodes, tok/s, ETAs); %d screens, last:\n%s", len(got), got[len(got)-1])
	}
	t.Logf("train: %d screens; phases seen: %v", len(got), phases)
	last := got[len(got)-1]
	if !strings.Contains(last, "trained steps 1..3") {
		t.Errorf("train did not finish:\n%s", last)
	}
	got = screens("eval", fmt.Sprintf("%s eval -m %s --tasks melt,light-bulb --variations 2 --episodes 2 --threads 1", binPath, model), "EVAL-EXITED")
	// eval's episodes end together at the end of its batch, so its ETA is
	// known only once one has finished (a short eval may end first): the
	// line must show the episodes and tok/s, and the ETA in its form when shown
	evalLine := regexp.MustCompile(`eval \d+/8 · [\d.]+ tok/s( · ETA \d+(s|m\d\ds))?(\s|$)`)
	ok := false
	for _, s := range got {
		ok = ok || evalLine.MatchString(s)
	}
	if !ok {
		t.Errorf("no screen showed eval's line (episodes, tok/s, ETA); last:\n%s", got[len(got)-1])
	}
}
