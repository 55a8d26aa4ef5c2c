// Command exptable turns the output directory of scripts/experiment.sh into
// the results table of docs/results.md (mean ± sample std over seeds), the
// pre-registered decision (docs/experiment.md, Study 2: EMPO² − GRPO on the
// held-out score without memory against 2 × the pooled standard error),
// computed here from the same per-seed figures, and a diagnosis page (mode mix, masking rate, clip fraction, KL, retrieval,
// quoted tips) read from each run's metrics.jsonl and exported memory.
//
//	go build -o exptable ./scripts/exptable
//	exptable -out build/experiment -diagnosis build/experiment/diagnosis.md > table.md
//	exptable -gate build/experiment/gate > gate.md   # Study 3's gate (gate.go)
//
// Layout read (docs/experiment.md): OUT/warmstart/eval/*.json and
// OUT/runs/<arm>-s<seed>/{eval/*.json,metrics.jsonl,memory.jsonl}, with the
// eval file names the script writes: test-off.json, pool.json,
// ood-rl-test.json, ood-heldout.json (schemas of `empo2 eval --json`).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/empo2/empo2/internal/safefile"
	"github.com/empo2/empo2/trainer/rollout"
)

// ErrLayout: the directory is not an experiment output.
var ErrLayout = errors.New("exptable: not an experiment output directory")

// evalSetting is one memory setting of `empo2 eval --json`.
type evalSetting struct {
	ScoreMean   float64 `json:"score_mean"`
	SuccessRate float64 `json:"success_rate"`
	Episodes    int     `json:"episodes"`
}

type evalFile struct {
	MemoryOff *evalSetting `json:"memory_off"`
	MemoryOn  *evalSetting `json:"memory_on"`
}

// skillFile is the warm start's sanity check on its SFT families
// (sft-families-test-off.json): the per-task figures of memory off.
type skillFile struct {
	MemoryOff *struct {
		evalSetting
		Tasks map[string]evalSetting `json:"tasks"`
	} `json:"memory_off"`
}

type oodSeries struct {
	ScorePerTrial   []float64 `json:"score_per_trial"`
	SuccessPerTrial []float64 `json:"success_per_trial"`
}

type oodFile struct {
	Variations int       `json:"variations"`
	Trials     int       `json:"trials"`
	MemoryOn   oodSeries `json:"memory_on"`
	MemoryOff  oodSeries `json:"memory_off"`
}

// stepLine is the subset of metrics.jsonl used here.
type stepLine struct {
	Step              int            `json:"step"`
	Mode              string         `json:"mode"`
	Modes             map[string]int `json:"modes"`
	Episodes          int            `json:"episodes"`
	ScoreMean         float64        `json:"score_mean"`
	SuccessRate       float64        `json:"success_rate"`
	TipsRetrievedMean float64        `json:"tips_retrieved_mean"`
	TipsWritten       int            `json:"tips_written"`
	ClipFrac          float64        `json:"clip_frac"`
	ApproxKL          float64        `json:"approx_kl"`
	GradNorm          float64        `json:"grad_norm"`
	MaskedSeqs        int            `json:"masked_seqs"`
	SampleSteps       int            `json:"sample_steps"`
	Sequences         int            `json:"sequences"`
	ZeroVarGroups     int            `json:"zero_var_groups"`
	TrainedTokens     int            `json:"trained_tokens"`
	GenTokens         int            `json:"gen_tokens"`
	EnvSteps          int            `json:"env_steps"`
	TStep             float64        `json:"t_step"`
	Updates           int            `json:"updates"`
	// present only in builds that record them (nil / empty otherwise)
	TipsTrueFrac       *float64       `json:"tips_true_frac"`
	TipsWellFormedFrac *float64       `json:"tips_wellformed_frac"`
	EndReasons         map[string]int `json:"end_reasons"`
}

type memLine struct {
	Namespace string  `json:"namespace"`
	Content   string  `json:"content"`
	Score     float64 `json:"score"`
	Step      int64   `json:"step"`
	Episode   string  `json:"episode"`
}

// run is one policy: the warm start or one trained run.
type run struct {
	arm      string
	seed     string
	test     *evalFile
	pool     *evalFile
	oodRL    *oodFile
	oodHO    *oodFile
	skill    *skillFile // warm start only: its SFT families
	steps    []stepLine
	tips     []memLine
	rollouts int // batch.rollouts of its config.yaml (0: unknown)
}

// rolloutsPer is the run's group size (1 when unknown).
func rolloutsPer(r *run) int { return max(1, r.rollouts) }

var runName = regexp.MustCompile(`^(.+)-s(\d+)$`)

func main() {
	out := flag.String("out", "", "experiment output `DIR` (scripts/experiment.sh's OUT)")
	diag := flag.String("diagnosis", "", "also write the diagnosis page to `FILE`")
	gate := flag.String("gate", "", "instead: the pre-registered gate's table and verdict from `DIR` (OUT/gate: pool-sS.json, heldout-sS.json; gate.go)")
	gateRule := flag.String("gate-rule", RulePaired, "the gate's `rule`: paired (gate run 9 on: per-seed differences, ≥ 10 seeds) or unpaired (gate runs 1–8; gate.go)")
	reading := flag.Bool("reading", false, "instead: does the policy read its memory? from the episodes files given as arguments (eval --ood --episodes-out; reading.go)")
	flag.Parse()
	if *reading {
		var sts []*readingStats
		for _, p := range flag.Args() {
			s, err := loadReading(p)
			if err != nil {
				fmt.Fprintln(os.Stderr, "exptable:", err)
				os.Exit(1)
			}
			sts = append(sts, s)
		}
		writeReading(os.Stdout, sts)
		return
	}
	if *gate != "" {
		g, err := loadGate(*gate)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if _, ok := gateRules[*gateRule]; !ok {
			fmt.Fprintf(os.Stderr, "exptable: -gate-rule %q: want %s or %s\n", *gateRule, RulePaired, RuleUnpaired)
			os.Exit(2)
		}
		writeGate(os.Stdout, g, *gateRule)
		return
	}
	if *out == "" {
		fmt.Fprintln(os.Stderr, "exptable: -out DIR is required")
		os.Exit(2)
	}
	runs, err := load(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	writeTable(os.Stdout, runs)
	if *diag != "" {
		if err := safefile.WriteFunc(*diag, 0o644, func(w io.Writer) error {
			writeDiagnosis(w, runs)
			return nil
		}); err != nil {
			fmt.Fprintln(os.Stderr, "exptable:", err)
			os.Exit(1)
		}
	}
}

// load reads the warm start and every run directory under out/runs.
func load(out string) ([]*run, error) {
	var runs []*run
	if ws, err := loadRun(filepath.Join(out, "warmstart"), "warm start", "-"); err == nil {
		runs = append(runs, ws)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	dirs, err := os.ReadDir(filepath.Join(out, "runs"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("exptable: %w", err)
	}
	for _, d := range dirs {
		m := runName.FindStringSubmatch(d.Name())
		if !d.IsDir() || m == nil {
			continue
		}
		r, err := loadRun(filepath.Join(out, "runs", d.Name()), m[1], m[2])
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("%w: %s has neither warmstart/ nor runs/<arm>-s<seed>/", ErrLayout, out)
	}
	return runs, nil
}

func loadRun(dir, arm, seed string) (*run, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, err
	}
	r := &run{arm: arm, seed: seed}
	for _, f := range []struct {
		name string
		dst  any
	}{
		{"test-off.json", &evalFile{}},
		{"pool.json", &evalFile{}},
		{"ood-rl-test.json", &oodFile{}},
		{"ood-heldout.json", &oodFile{}},
		{"sft-families-test-off.json", &skillFile{}},
	} {
		b, err := os.ReadFile(filepath.Join(dir, "eval", f.name))
		if errors.Is(err, os.ErrNotExist) {
			continue // not evaluated (yet): the table shows a dash
		}
		if err != nil {
			return nil, fmt.Errorf("exptable: %w", err)
		}
		if err := json.Unmarshal(b, f.dst); err != nil {
			return nil, fmt.Errorf("exptable: %s: %w", filepath.Join(dir, "eval", f.name), err)
		}
		switch v := f.dst.(type) {
		case *skillFile:
			r.skill = v
		case *evalFile:
			if f.name == "test-off.json" {
				r.test = v
			} else {
				r.pool = v
			}
		case *oodFile:
			if f.name == "ood-rl-test.json" {
				r.oodRL = v
			} else {
				r.oodHO = v
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "config.yaml")); err == nil {
		var cfg struct {
			Batch struct {
				Rollouts int `yaml:"rollouts"`
			} `yaml:"batch"`
		}
		if err := yaml.Unmarshal(b, &cfg); err != nil {
			return nil, fmt.Errorf("exptable: %s: %w", filepath.Join(dir, "config.yaml"), err)
		}
		r.rollouts = cfg.Batch.Rollouts
	}
	var err error
	if r.steps, err = readJSONL[stepLine](filepath.Join(dir, "metrics.jsonl")); err != nil {
		return nil, err
	}
	if r.tips, err = readJSONL[memLine](filepath.Join(dir, "memory.jsonl")); err != nil {
		return nil, err
	}
	return r, nil
}

// readJSONL reads one JSON object per line; a missing file is empty; a
// repeated step (resumed run) is kept as written (the caller sees both).
func readJSONL[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("exptable: %w", err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var v T
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			return nil, fmt.Errorf("exptable: %s:%d: %w", path, n, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("exptable: %s: %w", path, err)
	}
	return out, nil
}

// meanStd is the mean and the sample standard deviation (n−1; 0 for n = 1).
func meanStd(xs []float64) (mean, std float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	for _, x := range xs {
		std += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(std / float64(len(xs)-1))
}

// cell formats mean ± std of the values get returns for the runs (ok false:
// the run lacks the value); scale 100 shows rates as percent.
func cell(runs []*run, get func(*run) (float64, bool), scale float64) string {
	var xs []float64
	for _, r := range runs {
		if v, ok := get(r); ok {
			xs = append(xs, v*scale)
		}
	}
	if len(xs) == 0 {
		return "—"
	}
	m, s := meanStd(xs)
	if len(xs) == 1 {
		return fmt.Sprintf("%.1f", m)
	}
	return fmt.Sprintf("%.1f ± %.1f", m, s)
}

// groups returns the runs by arm: the warm start first, then the arms in a
// fixed order (others alphabetically).
func groups(runs []*run) (arms []string, by map[string][]*run) {
	by = map[string][]*run{}
	for _, r := range runs {
		if _, ok := by[r.arm]; !ok {
			arms = append(arms, r.arm)
		}
		by[r.arm] = append(by[r.arm], r)
	}
	order := map[string]int{"warm start": 0, "grpo": 1, "empo2": 2, "empo2-paper": 3, "memory-only": 4}
	sort.SliceStable(arms, func(i, j int) bool {
		oi, iok := order[arms[i]]
		oj, jok := order[arms[j]]
		switch {
		case iok && jok:
			return oi < oj
		case iok != jok:
			return iok
		}
		return arms[i] < arms[j]
	})
	return arms, by
}

func setting(f *evalFile, on bool) *evalSetting {
	if f == nil {
		return nil
	}
	if on {
		return f.MemoryOn
	}
	return f.MemoryOff
}

func evalGet(pick func(*run) *evalFile, on, success bool) func(*run) (float64, bool) {
	return func(r *run) (float64, bool) {
		s := setting(pick(r), on)
		if s == nil {
			return 0, false
		}
		if success {
			return s.SuccessRate, true
		}
		return s.ScoreMean, true
	}
}

// oodGet is the score (or success rate) of trial k (0-based; −1 = last).
func oodGet(pick func(*run) *oodFile, on, success bool, k int) func(*run) (float64, bool) {
	return func(r *run) (float64, bool) {
		f := pick(r)
		if f == nil {
			return 0, false
		}
		s := f.MemoryOff
		if on {
			s = f.MemoryOn
		}
		xs := s.ScorePerTrial
		if success {
			xs = s.SuccessPerTrial
		}
		if len(xs) == 0 {
			return 0, false
		}
		if k < 0 || k >= len(xs) {
			k = len(xs) - 1
		}
		return xs[k], true
	}
}

func trials(runs []*run) int {
	for _, r := range runs {
		for _, f := range []*oodFile{r.oodRL, r.oodHO} {
			if f != nil && len(f.MemoryOn.ScorePerTrial) > 0 {
				return len(f.MemoryOn.ScorePerTrial)
			}
		}
	}
	return 0
}

func writeTable(w io.Writer, runs []*run) {
	arms, by := groups(runs)
	test := func(r *run) *evalFile { return r.test }
	pool := func(r *run) *evalFile { return r.pool }
	oodRL := func(r *run) *oodFile { return r.oodRL }
	oodHO := func(r *run) *oodFile { return r.oodHO }
	K := trials(runs)

	writeDecision(w, runs)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Mean ± sample standard deviation over seeds (n = seeds); success in %, score 0–100 (−100 on a wrong focus).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "**Held-out variations and the training pool** (temperature 0.4; pool memory on = the run's own memory)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| arm | n | held-out success, memory off | held-out score, memory off | pool success, off | pool success, on | pool score, off | pool score, on |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, a := range arms {
		rs := by[a]
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s | %s |\n", a, len(rs),
			cell(rs, evalGet(test, false, true), 100), cell(rs, evalGet(test, false, false), 1),
			cell(rs, evalGet(pool, false, true), 100), cell(rs, evalGet(pool, true, true), 100),
			cell(rs, evalGet(pool, false, false), 1), cell(rs, evalGet(pool, true, false), 1))
	}
	for _, r := range runs {
		if r.skill == nil || r.skill.MemoryOff == nil {
			continue
		}
		s := r.skill.MemoryOff
		var names []string
		for n := range s.Tasks {
			names = append(names, n)
		}
		sort.Strings(names)
		var per []string
		for _, n := range names {
			t := s.Tasks[n]
			per = append(per, fmt.Sprintf("%s %.0f %% / %.1f (%d)", n, 100*t.SuccessRate, t.ScoreMean, t.Episodes))
		}
		fmt.Fprintf(w, "\nThe %s on its SFT families (test variations, memory off; success / score (episodes)): %.1f %% / %.1f over %d episodes — %s.\n",
			r.arm, 100*s.SuccessRate, s.ScoreMean, s.Episodes, strings.Join(per, ", "))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "**Adaptation with memory and no weight updates** (score, trial 1 → trial %d; control = the same trials without memory)\n\n", K)
	fmt.Fprintln(w, "| arm | held-out variations, memory on | control | boil + freeze (OOD), memory on | control | OOD success trial 1 → K, memory on |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- |")
	arrow := func(rs []*run, pick func(*run) *oodFile, on, success bool, scale float64) string {
		return cell(rs, oodGet(pick, on, success, 0), scale) + " → " + cell(rs, oodGet(pick, on, success, -1), scale)
	}
	for _, a := range arms {
		rs := by[a]
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", a,
			arrow(rs, oodRL, true, false, 1), arrow(rs, oodRL, false, false, 1),
			arrow(rs, oodHO, true, false, 1), arrow(rs, oodHO, false, false, 1),
			arrow(rs, oodHO, true, true, 100))
	}
	fmt.Fprintln(w)
	tableHead(w, "**Training budget and last steps** (per run, mean ± std over seeds; last = mean of the last 5 steps)",
		"arm", "steps", "episodes", "env steps", "generated tokens", "trained tokens", "seconds", "train success, last", "train score, last")
	for _, a := range arms {
		rs := by[a]
		if len(rs[0].steps) == 0 {
			continue
		}
		sum := func(f func(stepLine) float64) func(*run) (float64, bool) {
			return func(r *run) (float64, bool) {
				if len(r.steps) == 0 {
					return 0, false
				}
				t := 0.0
				for _, s := range r.steps {
					t += f(s)
				}
				return t, true
			}
		}
		last := func(f func(stepLine) float64) func(*run) (float64, bool) {
			return func(r *run) (float64, bool) {
				if len(r.steps) == 0 {
					return 0, false
				}
				tail := r.steps[max(0, len(r.steps)-5):]
				t := 0.0
				for _, s := range tail {
					t += f(s)
				}
				return t / float64(len(tail)), true
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", a,
			cell(rs, sum(func(stepLine) float64 { return 1 }), 1),
			cell(rs, sum(func(s stepLine) float64 { return float64(s.Episodes) }), 1),
			cell(rs, sum(func(s stepLine) float64 { return float64(s.EnvSteps) }), 1),
			cell(rs, sum(func(s stepLine) float64 { return float64(s.GenTokens) }), 1),
			cell(rs, sum(func(s stepLine) float64 { return float64(s.TrainedTokens) }), 1),
			cell(rs, sum(func(s stepLine) float64 { return s.TStep }), 1),
			cell(rs, last(func(s stepLine) float64 { return s.SuccessRate }), 100),
			cell(rs, last(func(s stepLine) float64 { return s.ScoreMean }), 1))
	}
	fmt.Fprintln(w)
	writeTraining(w, runs)
}

// writeDiagnosis: what the issue asks to look at when EMPO² does not win.
func writeDiagnosis(w io.Writer, runs []*run) {
	arms, by := groups(runs)
	fmt.Fprintln(w, "# Diagnosis per arm (from metrics.jsonl and memory.jsonl)")
	for _, a := range arms {
		rs := by[a]
		if len(rs[0].steps) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n## %s\n\n", a)
		fmt.Fprintln(w, "| seed | steps per mode | score per mode | masked responses / responses (masking steps) | zero-variance groups | clip frac (mean) | approx KL (mean / max) | grad norm (mean) | tips retrieved per step (memory steps) | tips written |")
		fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
		for _, r := range rs {
			modes := map[string]int{}
			modeScore := map[string]float64{}
			// masking rate over the steps that mask (off-policy by default):
			// masked responses / responses of the groups with a signal
			// (sample_steps; metrics without it: env_steps × the share of
			// groups with variance, marked ≈)
			var masked, resp, zero, written, upd, memSteps int
			approx := false
			var clip, kl, klMax, gn, retr float64
			for _, s := range r.steps {
				modes[s.Mode]++
				modeScore[s.Mode] += s.ScoreMean
				if s.MaskedSeqs > 0 {
					masked += s.MaskedSeqs
					if s.SampleSteps > 0 {
						resp += s.SampleSteps
					} else if groups := s.Episodes / rolloutsPer(r); groups > 0 {
						resp += s.EnvSteps * (groups - s.ZeroVarGroups) / groups
						approx = true
					}
				}
				zero += s.ZeroVarGroups
				written += s.TipsWritten
				if s.Updates > 0 {
					upd++
					clip += s.ClipFrac
					kl += s.ApproxKL
					klMax = math.Max(klMax, math.Abs(s.ApproxKL))
					gn += s.GradNorm
				}
				if s.Mode != "on-policy" {
					memSteps++
					retr += s.TipsRetrievedMean
				}
			}
			var names []string
			for m := range modes {
				names = append(names, m)
			}
			sort.Strings(names)
			var mm, ms []string
			for _, m := range names {
				mm = append(mm, fmt.Sprintf("%s %d", m, modes[m]))
				ms = append(ms, fmt.Sprintf("%s %.1f", m, modeScore[m]/float64(modes[m])))
			}
			div := func(a float64, n int) string {
				if n == 0 {
					return "—"
				}
				return fmt.Sprintf("%.4g", a/float64(n))
			}
			maskRate := "0"
			if resp > 0 {
				sign := ""
				if approx {
					sign = "≈ "
				}
				maskRate = fmt.Sprintf("%d / %s%d (%.1f%%)", masked, sign, resp, 100*float64(masked)/float64(resp))
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %d | %s | %s / %.4g | %s | %s | %d |\n", r.seed,
				strings.Join(mm, ", "), strings.Join(ms, ", "), maskRate, zero,
				div(clip, upd), div(kl, upd), klMax, div(gn, upd), div(retr, memSteps), written)
		}
		quoteTips(w, rs)
	}
}

// quoteTips prints real tips of the first run with a memory: the distinct
// tip texts (the part before the per-step suffix) of the best and the worst
// episodes, as stored.
func quoteTips(w io.Writer, rs []*run) {
	for _, r := range rs {
		if len(r.tips) == 0 {
			continue
		}
		type tip struct {
			text, ns string
			score    float64
			step     int64
		}
		seen := map[string]bool{}
		var ts []tip
		for _, m := range r.tips {
			t := tipText(m.Content)
			if seen[t] {
				continue
			}
			seen[t] = true
			ts = append(ts, tip{t, m.Namespace, m.Score, m.Step})
		}
		sort.SliceStable(ts, func(i, j int) bool { return ts[i].score > ts[j].score })
		fmt.Fprintf(w, "\nTips of seed %s (%d entries, %d distinct tips); the three best and the three worst episodes' tips, verbatim:\n\n", r.seed, len(r.tips), len(ts))
		pick := ts
		if len(ts) > 6 {
			pick = append(append([]tip{}, ts[:3]...), ts[len(ts)-3:]...)
		}
		for _, t := range pick {
			fmt.Fprintf(w, "- `%s` step %d, score %g: %q\n", t.ns, t.step, t.score, t.text)
		}
		return
	}
}

// Verdicts of the pre-registered decision rule.
const (
	VerdictBetter    = "EMPO² better"
	VerdictWorse     = "EMPO² worse"
	VerdictNoDiff    = "no difference detectable"
	VerdictUndecided = "undecided: fewer than 2 seeds in an arm"
)

// decision compares the per-seed values of an EMPO² arm (a) with GRPO's
// (b): D = mean(a) − mean(b), SE = sqrt(s_a²/n_a + s_b²/n_b) with sample
// standard deviations (Welch's standard error of a difference of means);
// better iff D > 2·SE, worse iff D < −2·SE, else no difference
// detectable. With fewer than 2 values in an arm s is undefined and the
// rule does not decide.
type decision struct {
	D, SE   float64
	NA, NB  int
	Verdict string
}

func decide(a, b []float64) decision {
	d := decision{NA: len(a), NB: len(b)}
	if len(a) < 2 || len(b) < 2 {
		d.D, d.SE = math.NaN(), math.NaN()
		if len(a) > 0 && len(b) > 0 {
			ma, _ := meanStd(a)
			mb, _ := meanStd(b)
			d.D = ma - mb
		}
		d.Verdict = VerdictUndecided
		return d
	}
	ma, sa := meanStd(a)
	mb, sb := meanStd(b)
	d.D = ma - mb
	d.SE = math.Sqrt(sa*sa/float64(len(a)) + sb*sb/float64(len(b)))
	switch {
	case d.D > 2*d.SE:
		d.Verdict = VerdictBetter
	case d.D < -2*d.SE:
		d.Verdict = VerdictWorse
	default:
		d.Verdict = VerdictNoDiff
	}
	return d
}

// values are get's values over the runs that have one.
func values(runs []*run, get func(*run) (float64, bool), scale float64) []float64 {
	var xs []float64
	for _, r := range runs {
		if v, ok := get(r); ok {
			xs = append(xs, v*scale)
		}
	}
	return xs
}

// writeDecision prints the pre-registered rule applied to every EMPO² arm
// against GRPO: held-out score without memory decides; success is
// computed the same way and reported beside it.
func writeDecision(w io.Writer, runs []*run) {
	arms, by := groups(runs)
	test := func(r *run) *evalFile { return r.test }
	grpo := by["grpo"]
	fmt.Fprintln(w, "**Decision** (pre-registered, docs/experiment.md Study 2; computed by scripts/exptable from the per-seed held-out figures, memory off, temperature 0.4): D = mean(EMPO²) − mean(GRPO), SE = sqrt(s₁²/n₁ + s₂²/n₂); EMPO² better iff D > 2·SE, worse iff D < −2·SE, else no difference detectable. Score decides; success (percentage points) is reported beside it.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| comparison | n | score D | SE | 2·SE | **verdict (score)** | success D (pp) | SE | verdict (success) |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	f := func(x float64) string {
		if math.IsNaN(x) {
			return "—"
		}
		return fmt.Sprintf("%.2f", x)
	}
	for _, a := range arms {
		if !strings.HasPrefix(a, "empo2") {
			continue
		}
		sc := decide(values(by[a], evalGet(test, false, false), 1), values(grpo, evalGet(test, false, false), 1))
		su := decide(values(by[a], evalGet(test, false, true), 100), values(grpo, evalGet(test, false, true), 100))
		fmt.Fprintf(w, "| %s − grpo | %d vs %d | %s | %s | %s | **%s** | %s | %s | %s |\n", a, sc.NA, sc.NB,
			f(sc.D), f(sc.SE), f(2*sc.SE), sc.Verdict, f(su.D), f(su.SE), su.Verdict)
	}
}

// trainStats are one run's training figures over its steps: the share of
// steps (or rollouts, per-rollout modes) in memory and off-policy modes,
// the masking rate (masked responses / responses with a signal), the mean
// clip fraction and updates of the steps that updated, the mean true-tip
// fraction of the steps that report one (and the well-formed fraction),
// the share of episodes that ended on a full context, and the mean length
// of the written tips in characters, one per episode (memory.jsonl; ok
// false: not recorded).
type trainStats struct {
	memFrac, offFrac, maskRate, clip, updates, tipsTrue, tipsWell, ctxEnd, tipLen float64
	maskOK, updOK, tipsOK, ctxOK, lenOK                                           bool
	offUpdates                                                                    int // optimizer updates of the off-policy steps (Study 3: ≥ 15 per EMPO² seed)
}

func stats(r *run) (t trainStats, ok bool) {
	if len(r.steps) == 0 {
		return t, false
	}
	var all, mem, off, masked, resp, upd, nTrue, eps, ctxEnds int
	var clip, updates, tru, well float64
	for _, s := range r.steps {
		modes := s.Modes
		if len(modes) == 0 {
			modes = map[string]int{s.Mode: 1}
		}
		for m, n := range modes {
			all += n
			if m != "on-policy" {
				mem += n
			}
			if m == "off-policy" {
				off += n
			}
		}
		masked += s.MaskedSeqs
		resp += s.SampleSteps
		if s.Updates > 0 {
			upd++
			clip += s.ClipFrac
			updates += float64(s.Updates)
			if s.Mode == "off-policy" {
				t.offUpdates += s.Updates
			}
		}
		if s.TipsTrueFrac != nil {
			nTrue++
			tru += *s.TipsTrueFrac
			if s.TipsWellFormedFrac != nil {
				well += *s.TipsWellFormedFrac
			}
		}
		if len(s.EndReasons) > 0 {
			t.ctxOK = true
			ctxEnds += s.EndReasons["context"]
			for _, n := range s.EndReasons {
				eps += n
			}
		}
	}
	t.memFrac, t.offFrac = float64(mem)/float64(all), float64(off)/float64(all)
	if resp > 0 {
		t.maskRate, t.maskOK = float64(masked)/float64(resp), true
	}
	if upd > 0 {
		t.clip, t.updates, t.updOK = clip/float64(upd), updates/float64(upd), true
	}
	if nTrue > 0 {
		t.tipsTrue, t.tipsWell, t.tipsOK = tru/float64(nTrue), well/float64(nTrue), true
	}
	t.tipLen, t.lenOK = meanTipLength(r.tips)
	if t.ctxOK && eps > 0 {
		t.ctxEnd = float64(ctxEnds) / float64(eps)
	}
	return t, true
}

// tipText is the tip of a memory entry: its content without what the code
// appends (trainer/rollout.TipContent, parsed by its inverse
// rollout.ParseTipContent); content that is not in that form is returned
// whole.
func tipText(content string) string {
	if tip, _, _, ok := rollout.ParseTipContent(content); ok {
		return tip
	}
	return content
}

// meanTipLength is the mean length in characters of the tips written,
// one per episode (its entries repeat the tip once per step).
func meanTipLength(tips []memLine) (float64, bool) {
	seen := map[string]bool{}
	var sum, n int
	for _, m := range tips {
		if m.Episode == "" || seen[m.Episode] {
			continue
		}
		seen[m.Episode] = true
		sum += utf8.RuneCountInString(tipText(m.Content))
		n++
	}
	if n == 0 {
		return 0, false
	}
	return float64(sum) / float64(n), true
}

// writeTraining prints the training figures per arm (mean ± std over seeds).
func writeTraining(w io.Writer, runs []*run) {
	arms, by := groups(runs)
	get := func(f func(trainStats) (float64, bool)) func(*run) (float64, bool) {
		return func(r *run) (float64, bool) {
			t, ok := stats(r)
			if !ok {
				return 0, false
			}
			return f(t)
		}
	}
	tableHead(w, "**Training: mode mix, updates, masking, clipping, tips** (per run over its steps, mean ± std over seeds; memory = steps with tips in the rollouts, off-policy and on-policy-with-tips; masked = masked responses / responses with a signal; clip and updates: mean over the steps that updated; true and well-formed tips: tips_true_frac, tips_wellformed_frac; tip length: characters per written tip, one per episode; context ends: episodes ended on a full context)",
		"arm", "memory steps %", "off-policy steps %", "updates per step", "off-policy updates per run", "masked %", "clip frac %", "true tips %", "well-formed tips %", "tip length", "context ends %")
	for _, a := range arms {
		rs := by[a]
		if len(rs[0].steps) == 0 {
			continue
		}
		var offUpd []string // per seed, in the runs' order
		for _, r := range rs {
			if t, ok := stats(r); ok {
				offUpd = append(offUpd, strconv.Itoa(t.offUpdates))
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", a,
			cell(rs, get(func(t trainStats) (float64, bool) { return t.memFrac, true }), 100),
			cell(rs, get(func(t trainStats) (float64, bool) { return t.offFrac, true }), 100),
			cell(rs, get(func(t trainStats) (float64, bool) { return t.updates, t.updOK }), 1),
			strings.Join(offUpd, ", "),
			cell(rs, get(func(t trainStats) (float64, bool) { return t.maskRate, t.maskOK }), 100),
			cell(rs, get(func(t trainStats) (float64, bool) { return t.clip, t.updOK }), 100),
			cell(rs, get(func(t trainStats) (float64, bool) { return t.tipsTrue, t.tipsOK }), 100),
			cell(rs, get(func(t trainStats) (float64, bool) { return t.tipsWell, t.tipsOK }), 100),
			cell(rs, get(func(t trainStats) (float64, bool) { return t.tipLen, t.lenOK }), 1),
			cell(rs, get(func(t trainStats) (float64, bool) { return t.ctxEnd, t.ctxOK }), 100))
	}
}

// tableHead prints a table's title line and its Markdown header.
func tableHead(w io.Writer, title string, cols ...string) {
	fmt.Fprintln(w, title)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| "+strings.Join(cols, " | ")+" |")
	fmt.Fprintln(w, strings.Repeat("| --- ", len(cols))+"|")
}
