package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/empo2/empo2/memstore"
	"github.com/empo2/empo2/trainer"
	"github.com/empo2/empo2/trainer/optim"
)

// trainRound runs one `empo2 train` child and, once step ≥ minStep has
// finished its rollouts (the "phase done" line of the rollouts phase: the
// tips phase, which writes the memory, has begun), waits delay and sends
// SIGINT. It returns the exit error, stdout, stderr, the step signalled
// (0: none) and whether that step got past its tips (an old_logp phase or
// its metrics line came after the signal).
func trainRound(t *testing.T, minStep int, delay time.Duration, args ...string) (err error, stdout, stderr string, signalled int, pastTips bool) {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	pipe, perr := cmd.StderrPipe()
	if perr != nil {
		t.Fatal(perr)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	var log strings.Builder
	sc := bufio.NewScanner(pipe)
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		var l struct {
			Message string `json:"message"`
			Phase   string `json:"phase"`
			Step    int    `json:"step"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		switch {
		case signalled == 0 && l.Message == "phase done" && l.Phase == "rollouts" && l.Step >= minStep:
			time.Sleep(delay)
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatalf("SIGINT: %v\n%s", err, log.String())
			}
			signalled = l.Step
		case signalled > 0 && l.Step == signalled && (l.Phase == "old_logp" || l.Message == "step"):
			pastTips = true
		}
	}
	err = cmd.Wait()
	return err, out.String(), log.String(), signalled, pastTips
}

// Issue 38 §5 through the binary: SIGINT while `empo2 train` writes its
// memory (the tips phase of a step: every training episode's tip is stored,
// here the oracle's, so that the phase is all memory writes) ends every run
// with exit status 0 and "interrupted: checkpointed", never a raw SQL error
// ("sql: connection is already closed", "cannot start a transaction within
// a transaction"); the memory then holds no tip of the abandoned step and
// passes SQLite's integrity check, and `train --resume` continues. Rounds
// resume the same run, each signalled at another delay into the phase; a
// last resume trains one step to the end.
func TestTrainInterruptDuringMemoryWrite(t *testing.T) {
	model := trainModel(t)
	run := filepath.Join(t.TempDir(), "r")
	rounds := 12
	if testing.Short() {
		rounds = 4
	}
	first := []string{"train", "--preset", "empo2", "-m", model, "--env", "textlab", "--run-dir", run, "--steps", "1000", "--threads", "1",
		"--set", "batch.rollouts=4", "--set", "batch.tasks=4", "--set", "rollout.max_action_tokens=8", "--set", "rollout.step_limit=4",
		"--set", "rollout.oracle_tips=true", "--log-format", "json"}
	resume := []string{"train", "--run-dir", run, "--resume", "--threads", "1", "--log-format", "json"}
	inTips := 0
	for round := 0; round < rounds; round++ {
		args, minStep := resume, 1 // a resumed run's first step follows a checkpoint
		if round == 0 {
			args, minStep = first, 2 // after step 1's checkpoint
		}
		// 0…33 ms into the phase (≈ 20–40 ms for its 16 writes here)
		delay := time.Duration(round*3%34) * time.Millisecond
		err, stdout, stderr, step, pastTips := trainRound(t, minStep, delay, args...)
		all := stdout + stderr
		if step == 0 {
			t.Fatalf("round %d: the run ended before a step's rollouts finished: %v\n%s", round, err, all)
		}
		for _, bad := range []string{"sql:", "transaction", `"level":"error"`, "panic"} {
			if strings.Contains(all, bad) {
				t.Fatalf("round %d (SIGINT %v into step %d's tips): the output holds %q:\n%s", round, delay, step, bad, all)
			}
		}
		if err != nil {
			t.Fatalf("round %d (SIGINT %v into step %d's tips): %v, want exit status 0:\n%s", round, delay, step, err, all)
		}
		if !strings.Contains(stderr, "interrupted: checkpointed; continue with empo2 train --run-dir "+run+" --resume") {
			t.Fatalf("round %d (SIGINT %v into step %d's tips): no clean interrupt:\n%s", round, delay, step, all)
		}
		if !pastTips {
			inTips++
		}
		// the memory holds nothing after the checkpoint, and is sound
		ckpt, ok, err := latestStep(run)
		if err != nil || !ok || ckpt < step-1 {
			t.Fatalf("round %d: checkpoint %d (%v, %v) after a signal in step %d", round, ckpt, ok, err, step)
		}
		s, err := memstore.Open(filepath.Join(run, trainer.MemoryFile), nil)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		maxStep, err := s.MaxStep(context.Background())
		cerr := s.Check(context.Background())
		s.Close()
		if err != nil || cerr != nil || maxStep > int64(ckpt) || maxStep < 1 {
			t.Fatalf("round %d: memory max step %d (%v), integrity %v; checkpoint %d", round, maxStep, err, cerr, ckpt)
		}
	}
	t.Logf("%d of %d signals arrived while the step wrote its memory (the others after it)", inTips, rounds)
	if inTips == 0 {
		t.Errorf("no signal of %d arrived during a step's memory writes: the test did not exercise the write window", rounds)
	}
	ckpt, _, _ := latestStep(run)
	stdout, stderr, err := runCLI(t, append(resume, "--steps", fmt.Sprint(ckpt+1))...)
	if err != nil || !strings.Contains(stdout, fmt.Sprintf("trained steps %d..%d", ckpt+1, ckpt+1)) {
		t.Fatalf("resume after the interrupts: %v\n%s\n%s", err, stdout, stderr)
	}
}

// latestStep is the step of run's latest checkpoint.
func latestStep(run string) (int, bool, error) {
	info, ok, err := optim.LatestCheckpoint(run)
	return info.Step, ok, err
}
