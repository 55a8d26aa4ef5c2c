package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog/log"
	"github.com/urfave/cli/v2"

	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/internal/watch"
	"github.com/empo2/empo2/runfiles"
)

// `empo2 quickstart [DIR]`: the main job end to end on embedded defaults —
// demonstrations, a generated model, the SFT warm start, an EMPO² run on
// textlab (with the live page while it trains), eval with and without
// memory, the report — each stage one empo2 command run as a child process
// (printed, so that the user sees the commands), a marker per finished
// stage so that an interrupted quickstart continues where it stopped.

var (
	qsServeFlag   = &cli.BoolFlag{Name: "no-serve", Usage: "do not serve the live page (empo2 report --serve) while the run trains"}
	qsThreadsFlag = &cli.IntFlag{Name: "threads", Usage: "CPU threads of every stage (more than the cores is slower)", DefaultText: "all cores"}
	// qsSizeFlag picks the tests' reduced variant (hidden: not a user setting).
	qsSizeFlag = &cli.StringFlag{Name: "size", Usage: "default | smoke", Value: "default", Hidden: true}
	// qsUntilFlag stops after a stage, as an interrupt would (the resume test).
	qsUntilFlag = &cli.StringFlag{Name: "until", Usage: "stop after this stage", Hidden: true}
)

// QuickstartFile marks a directory that quickstart made (and owns).
const QuickstartFile = "quickstart.json"

// qsDoneDir holds one marker per finished stage.
const qsDoneDir = ".quickstart"

func init() {
	register(&cli.Command{
		Name:      "quickstart",
		Usage:     "run the main job end to end on built-in defaults: demos → model → SFT warm start → EMPO² run → eval with and without memory → report",
		ArgsUsage: "[DIR]",
		Description: "Everything goes into DIR (default empo2-quickstart): a new DIR must be missing or empty;\n" +
			"a DIR that quickstart made is continued, its finished stages skipped (interrupt it, run it again).\n" +
			"Each stage is one empo2 command, printed before it runs. About 10 minutes on 2 cores.\n\n" +
			"Examples:\n" +
			"   empo2 quickstart\n" +
			"   empo2 quickstart my-first-run --threads 2",
		Flags:  []cli.Flag{qsThreadsFlag, qsServeFlag, qsSizeFlag, qsUntilFlag},
		Action: quickstartAction,
	})
}

// qsPlan is the sizes of a quickstart.
type qsPlan struct {
	DemoVars   int      // demonstrations per task (train variations after the RL pool)
	DemoTasks  []string // tasks of the demonstrations ("" : every task not held out)
	SFTEpochs  int
	Task       string // the RL task
	Pool       int    // its training variations 0..Pool-1
	Steps      int
	Tasks      int // batch.tasks
	Rollouts   int // batch.rollouts
	StepLimit  int // 0: the environment's
	EvalVars   int // eval variations of the pool
	ModelFlags []string
}

func quickstartPlan(size string) (qsPlan, error) {
	switch size {
	case "default":
		return qsPlan{DemoVars: 6, SFTEpochs: 6, Task: "find-living-thing", Pool: 4, Steps: 4, Tasks: 2, Rollouts: 4, EvalVars: 4,
			ModelFlags: []string{"--vocab", "1024", "--layers", "2", "--hidden", "64", "--heads", "2", "--kv-heads", "1", "--ffn", "128"}}, nil
	case "smoke":
		return qsPlan{DemoVars: 1, DemoTasks: []string{"melt", "find-living-thing"}, SFTEpochs: 1, Task: "find-living-thing", Pool: 2,
			Steps: 2, Tasks: 1, Rollouts: 2, StepLimit: 4, EvalVars: 1,
			ModelFlags: []string{"--vocab", "384", "--layers", "1", "--hidden", "32", "--heads", "2", "--kv-heads", "1", "--ffn", "64"}}, nil
	}
	return qsPlan{}, fmt.Errorf("--size %q: want default or smoke", size)
}

// qsStage is one stage: the empo2 command lines it runs and what it writes.
type qsStage struct {
	name, what string
	outs       []string   // files and folders it writes (removed before a fresh try)
	cmds       [][]string // empo2 arguments
	serve      bool       // the live page while it runs
	check      func() error
}

// quickstart is one quickstart in its directory.
type quickstart struct {
	dir  string
	plan qsPlan
	self string // this program
	glob []string
	out  io.Writer
	// threads of every stage (0: all cores), also given to a resumed train
	// (its config.yaml keeps the first invocation's)
	threads int
}

func (q *quickstart) path(name string) string { return filepath.Join(q.dir, name) }

func quickstartAction(c *cli.Context) error {
	if c.NArg() > 1 {
		return fmt.Errorf("quickstart takes at most one argument, DIR (got %q)", c.Args().Slice())
	}
	if err := checkThreads(c); err != nil {
		return err
	}
	plan, err := quickstartPlan(c.String(qsSizeFlag.Name))
	if err != nil {
		return err
	}
	dir := c.Args().First()
	if dir == "" {
		dir = "empo2-quickstart"
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("quickstart: finding this program: %w", err)
	}
	q := &quickstart{dir: dir, plan: plan, self: self, out: c.App.Writer,
		glob: []string{"--log-level", c.String(logLevelFlag.Name), "--log-format", c.String(logFormatFlag.Name)}}
	lock, resumed, err := q.own()
	if err != nil {
		return err
	}
	defer lock.Close()
	q.threads = c.Int(qsThreadsFlag.Name)
	stages := q.stages()
	until := c.String(qsUntilFlag.Name)
	if until != "" && !slicesContainsStage(stages, until) {
		return fmt.Errorf("--until %q: not a stage", until)
	}
	ctx, sig := interruptible(c)
	defer sig.stop()
	t0 := time.Now()
	if resumed {
		fmt.Fprintf(q.out, "quickstart: continuing in %s (finished stages are skipped)\n", dir)
	} else {
		fmt.Fprintf(q.out, "quickstart: everything goes into %s\n", dir)
	}
	serve := !c.Bool(qsServeFlag.Name) && reportCanServe(c.App)
	if !serve && !c.Bool(qsServeFlag.Name) {
		fmt.Fprintln(q.out, "quickstart: this build has no live page (empo2 report --serve): the run is shown by its progress line only")
	}
	for i, st := range stages {
		marker := filepath.Join(dir, qsDoneDir, st.name)
		if _, err := os.Stat(marker); err == nil {
			fmt.Fprintf(q.out, "\n[%d/%d] %s: done before, skipped\n", i+1, len(stages), st.name)
		} else {
			fmt.Fprintf(q.out, "\n[%d/%d] %s: %s\n", i+1, len(stages), st.name, st.what)
			t := time.Now()
			if err := q.runStage(ctx, st, serve && st.serve); err != nil {
				if sig.caught() {
					return sig.interrupted(fmt.Sprintf("quickstart interrupted in stage %s; run `empo2 quickstart %s` again to continue", st.name, dir))
				}
				return fmt.Errorf("quickstart: stage %s: %w (run `empo2 quickstart %s` again to retry it; finished stages are kept)", st.name, err, dir)
			}
			if err := safefile.WriteFile(marker, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(q.out, "[%d/%d] %s: done in %s\n", i+1, len(stages), st.name, watch.Dur(time.Since(t)))
		}
		if st.name == until {
			fmt.Fprintf(q.out, "quickstart: stopped after %s (--until); run it again to continue\n", until)
			return nil
		}
	}
	return q.summary(time.Since(t0), resumed)
}

func slicesContainsStage(st []qsStage, name string) bool {
	for _, s := range st {
		if s.name == name {
			return true
		}
	}
	return false
}

// own takes DIR: a missing or empty one becomes a quickstart directory
// (its marker written), one with the marker is continued; anything else
// is refused and left untouched. The directory is locked while quickstart
// runs (a second one on it is refused).
func (q *quickstart) own() (*safefile.Lock, bool, error) {
	if err := os.MkdirAll(q.dir, 0o755); err != nil {
		return nil, false, err
	}
	lock, err := safefile.TryLock(q.dir)
	if err != nil {
		if errors.Is(err, safefile.ErrLocked) {
			return nil, false, fmt.Errorf("quickstart: %s is in use by another empo2 quickstart", q.dir)
		}
		return nil, false, err
	}
	ents, err := os.ReadDir(q.dir)
	if err != nil {
		lock.Close()
		return nil, false, err
	}
	if _, err := os.Stat(q.path(QuickstartFile)); err == nil {
		return lock, true, os.MkdirAll(q.path(qsDoneDir), 0o755)
	}
	if len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		sort.Strings(names)
		lock.Close()
		return nil, false, fmt.Errorf("quickstart: %s holds %s but no %s, so quickstart did not make it; nothing in it is changed: give a new or empty DIR",
			q.dir, quoteNames(names, 6), QuickstartFile)
	}
	mark, _ := json.Marshal(struct {
		Format  int       `json:"format"`
		Created time.Time `json:"created"`
	}{1, time.Now().UTC()})
	err = os.MkdirAll(q.path(qsDoneDir), 0o755)
	if err == nil {
		err = safefile.WriteFile(q.path(QuickstartFile), append(mark, '\n'), 0o644)
	}
	if err != nil {
		lock.Close()
		return nil, false, err
	}
	return lock, false, nil
}

func quoteNames(names []string, n int) string {
	if len(names) > n {
		return fmt.Sprintf("%v and %d more", names[:n], len(names)-n)
	}
	return fmt.Sprint(names)
}

// stages is the quickstart's plan as empo2 commands.
func (q *quickstart) stages() []qsStage {
	p := q.plan
	th := q.withThreads
	var limit []string
	if p.StepLimit > 0 {
		limit = []string{"--step-limit", strconv.Itoa(p.StepLimit)}
	}
	// explore demos (gold work, the rooms searched as a policy sees them)
	// need the teleport simplification: every stage plays that world
	simp := []string{"--simplifications", "easy"}
	demos := append([]string{"env", "demos", "textlab", "--split", "train", "--skip-variations", strconv.Itoa(p.Pool),
		"--variations", strconv.Itoa(p.DemoVars), "--kind", "explore", "--text", q.path("corpus.txt"), "-o", q.path("demos.jsonl")}, simp...)
	if len(p.DemoTasks) > 0 {
		demos = append(demos, "--tasks", strings.Join(p.DemoTasks, ","))
	}
	var pool []string
	for v := 0; v < p.Pool; v++ {
		pool = append(pool, fmt.Sprintf("%s/%d", p.Task, v))
	}
	train := th("train", "--preset", "empo2", "-m", q.path("sft.gguf"), "--env", "textlab", "--tasks", strings.Join(pool, ","),
		"--run-dir", q.path("run"), "--steps", strconv.Itoa(p.Steps), "--seed", "1",
		"--set", "batch.tasks="+strconv.Itoa(p.Tasks), "--set", "batch.rollouts="+strconv.Itoa(p.Rollouts),
		"--set", "update.lr=3e-3", "--set", "env_options.simplifications=easy")
	if p.StepLimit > 0 {
		train = append(train, "--set", "rollout.step_limit="+strconv.Itoa(p.StepLimit))
	}
	evalArgs := func(out string, policy ...string) []string {
		a := append([]string{"eval"}, policy...)
		a = append(a, "--tasks", p.Task, "--split", "train", "--variations", strconv.Itoa(p.EvalVars), "--seed", "1", "-o", q.path(out))
		a = append(a, simp...)
		return th(append(a, limit...)...)
	}
	sftArgs := th("sft", "--full", "-m", q.path("model.gguf"), "--data", q.path("demos.jsonl"), "-o", q.path("sft.gguf"),
		"--epochs", strconv.Itoa(p.SFTEpochs), "--lr", "3e-3", "--min-lr", "3e-4", "--warmup", "10", "--batch-tokens", "2048",
		"--no-pack", "--max-len", "2048", "--micro-tokens", "4096", "--seed", "1", "--resume")
	return []qsStage{
		{name: "demos", what: "demonstrations: textlab's training tasks solved (the rooms searched, then the gold actions), written as chats in the rollouts' prompt format (the SFT data, and the text the tokenizer learns from)",
			outs: []string{"demos.jsonl", "corpus.txt"}, cmds: [][]string{demos}},
		{name: "model", what: "a random tiny Qwen2 model whose byte-level BPE tokenizer is trained on the demonstrations' text",
			outs: []string{"model.gguf"}, cmds: [][]string{append([]string{"model", "init", "--out", q.path("model.gguf"), "--corpus", q.path("corpus.txt"), "--seed", "1"}, p.ModelFlags...)}},
		{name: "sft", what: "the warm start: every weight of the model fine-tuned on the demonstrations (a policy that acts before RL starts)",
			outs: []string{"sft.gguf"}, cmds: [][]string{sftArgs}},
		{name: "train", what: fmt.Sprintf("EMPO² on %s variations 0–%d: %d steps × %d variations × %d episodes; tips written to memory, LoRA updated each step",
			p.Task, p.Pool-1, p.Steps, p.Tasks, p.Rollouts),
			cmds: [][]string{train}, serve: true, check: q.trainDone},
		{name: "eval", what: "the warm start and the trained run on the training variations, the run with its memory off and on",
			outs: []string{"eval-warmstart.json", "eval-run.json"},
			cmds: [][]string{
				evalArgs("eval-warmstart.json", "-m", q.path("sft.gguf"), "--memory", "off"),
				evalArgs("eval-run.json", "--run", q.path("run"), "--memory", "both"),
			}},
		{name: "report", what: "learning curves and eval results: report/report.html",
			outs: []string{"report"}, cmds: [][]string{{"report", q.path("run"), "--out", q.path("report")}}},
	}
}

// runStage runs st's commands; a stage tried before and not finished is
// continued (train --resume, sft --resume) or its outputs are removed
// first.
func (q *quickstart) runStage(ctx context.Context, st qsStage, serve bool) error {
	for _, o := range st.outs {
		if err := os.RemoveAll(q.path(o)); err != nil {
			return err
		}
	}
	for _, args := range st.cmds {
		if st.name == "train" {
			args = q.trainArgs(args)
		}
		if serve {
			stop := q.serveLive(ctx)
			defer stop()
		}
		if err := q.run(ctx, args); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if st.check != nil {
		return st.check()
	}
	return nil
}

// withThreads appends --threads when quickstart was given it.
func (q *quickstart) withThreads(args ...string) []string {
	if q.threads > 0 {
		args = append(args, "--threads", strconv.Itoa(q.threads))
	}
	return args
}

// trainArgs continues a run that an earlier quickstart began (its run
// directory has run.json) and starts afresh one whose setup failed.
func (q *quickstart) trainArgs(args []string) []string {
	run := q.path("run")
	if _, err := os.Stat(filepath.Join(run, runfiles.RunFile)); err == nil {
		return q.withThreads("train", "--run-dir", run, "--resume")
	}
	_ = os.RemoveAll(run) // no run.json: train removed what it made, or left nothing of use
	return args
}

// trainDone checks that the run trained all its steps (train exits 0 when
// an interrupt checkpoints it too).
func (q *quickstart) trainDone() error {
	last, _, err := lastMetrics(q.path("run"))
	if err != nil {
		return err
	}
	if last.Step < q.plan.Steps {
		return fmt.Errorf("the run stopped at step %d of %d", last.Step, q.plan.Steps)
	}
	return nil
}

// run runs this program with args, its output on ours; an interrupt is
// passed on to it (train then checkpoints) and waited for.
func (q *quickstart) run(ctx context.Context, args []string) error {
	full := append(append([]string(nil), q.glob...), args...)
	fmt.Fprintf(q.out, "  $ empo2 %s\n", shellJoin(args))
	cmd := exec.CommandContext(ctx, q.self, full...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = q.out, os.Stderr, nil
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Minute // a checkpoint being written completes
	return cmd.Run()
}

func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t'\"$\\") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

// reportCanServe reports whether this build's report command has the live
// page (--serve).
func reportCanServe(app *cli.App) bool {
	if cmd := app.Command("report"); cmd != nil {
		for _, f := range cmd.Flags {
			for _, n := range f.Names() {
				if n == "serve" {
					return true
				}
			}
		}
	}
	return false
}

// serveLive serves the live page of the run (empo2 report --serve on a free
// loopback port) once the run directory exists, until the returned stop.
func (q *quickstart) serveLive(ctx context.Context) (stop func()) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Warn().Err(err).Msg("quickstart: no free port for the live page")
		return func() {}
	}
	addr := l.Addr().String()
	l.Close()
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		run := q.path("run")
		for { // train makes the run directory after its checks
			if _, err := os.Stat(filepath.Join(run, runfiles.RunFile)); err == nil {
				break
			}
			select {
			case <-sctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		fmt.Fprintf(q.out, "  live page: http://%s/ (empo2 report --serve %s %s; it stops with the run)\n", addr, addr, run)
		logf, err := os.Create(q.path("serve.log"))
		if err != nil {
			return
		}
		defer logf.Close()
		cmd := exec.CommandContext(sctx, q.self, append(append([]string(nil), q.glob...), "report", "--serve", addr, run)...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = 5 * time.Second
		_ = cmd.Run()
	}()
	return func() {
		cancel()
		<-done
	}
}

// lastMetrics reads a run's metrics.jsonl: its last line and its first.
func lastMetrics(run string) (last, first runfiles.Metrics, err error) {
	f, err := os.Open(filepath.Join(run, runfiles.MetricsFile))
	if err != nil {
		return last, first, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	n := 0
	for sc.Scan() {
		var m runfiles.Metrics
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return last, first, fmt.Errorf("%s: %w", f.Name(), err)
		}
		if n == 0 {
			first = m
		}
		last, n = m, n+1
	}
	if n == 0 {
		return last, first, fmt.Errorf("%s: no step", f.Name())
	}
	return last, first, sc.Err()
}

func readEval(path string) (runfiles.EvalReport, error) {
	var r runfiles.EvalReport
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(b, &r)
}

// summary prints where everything is and what the numbers mean.
func (q *quickstart) summary(took time.Duration, resumed bool) error {
	p := q.plan
	w := q.out
	last, first, err := lastMetrics(q.path("run"))
	if err != nil {
		return err
	}
	ws, err := readEval(q.path("eval-warmstart.json"))
	if err != nil {
		return err
	}
	rr, err := readEval(q.path("eval-run.json"))
	if err != nil {
		return err
	}
	when := "in " + watch.Dur(took)
	if resumed {
		when += " (this invocation)"
	}
	rel := func(name string) string {
		if r, err := filepath.Rel(".", q.path(name)); err == nil && !strings.HasPrefix(r, "..") {
			return r
		}
		return q.path(name)
	}
	fmt.Fprintf(w, "\nquickstart finished %s. Everything is in %s:\n", when, q.dir)
	tw := []struct{ name, what string }{
		{"demos.jsonl", "the demonstrations: textlab's training tasks solved step by step, as chats (SFT data)"},
		{"model.gguf", "a random tiny Qwen2 model (its tokenizer learned from corpus.txt)"},
		{"sft.gguf", "the warm start: model.gguf fine-tuned on the demonstrations"},
		{"run/", "the EMPO² run: config.yaml, metrics.jsonl (a line per step), memory.db (the tips), checkpoints/ (the LoRA adapter)"},
		{"eval-warmstart.json, eval-run.json", "the evaluations (also in run/eval/)"},
		{"report/report.html", "learning curves and eval results: open it in a browser"},
	}
	for _, t := range tw {
		fmt.Fprintf(w, "  %-36s %s\n", t.name, t.what)
	}
	fmt.Fprintf(w, "\nWhat the numbers mean. score is textlab's 0–100 progress on a task; success is the share of episodes that reach 100.\n")
	fmt.Fprintf(w, "  training (run/metrics.jsonl): step 1 score %.1f, success %.0f %% → step %d score %.1f, success %.0f %%; %s\n",
		first.ScoreMean, 100*first.SuccessRate, last.Step, last.ScoreMean, 100*last.SuccessRate, stepNote(last))
	fmt.Fprintf(w, "  eval on %s variations 0–%d (%d episode each, temperature %.1f):\n", p.Task, p.EvalVars-1, 1, ws.Temperature)
	row := func(name string, r *runfiles.EvalResult) {
		if r == nil {
			return
		}
		fmt.Fprintf(w, "    %-34s score %5.1f   success %3.0f %%   (%d episodes)\n", name, r.ScoreMean, 100*r.SuccessRate, r.Episodes)
	}
	row("warm start (sft.gguf)", ws.MemoryOff)
	row("after EMPO², memory off", rr.MemoryOff)
	row("after EMPO², memory on (its tips)", rr.MemoryOn)
	fmt.Fprintf(w, "  Memory on retrieves the tips the run wrote for the same variation; EMPO² trains the policy to do without them (memory off).\n"+
		"  %d steps on a tiny model show every part working, not learning: differences this small are noise (docs/results.md has the studies).\n", p.Steps)
	fmt.Fprintf(w, "\nNext:\n  empo2 train --run-dir %s --resume --steps %d   # train on\n  empo2 report --serve 127.0.0.1:8080 %s   # the live page of a run\n  docs/train.md, docs/eval.md, docs/report.md\n",
		rel("run"), 4*p.Steps, rel("run"))
	return nil
}

// stepNote says what the last step did.
func stepNote(m runfiles.Metrics) string {
	if m.Updates == 0 {
		return "that step made no update (its groups' episodes scored alike: GRPO had nothing to learn from)"
	}
	return fmt.Sprintf("that step made %d updates (loss %.4f, KL %.4f)", m.Updates, m.Loss, m.ApproxKL)
}
