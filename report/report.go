package report

import (
	"context"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Options configure a report.
type Options struct {
	Out     string   // output directory (created); report.html and the pictures go here
	Smooth  int      // moving-average window in steps; 0 = auto (steps/10, 1..50); 1 = none
	Formats []string // picture formats: "png", "svg" (default both)
	DPI     int      // PNG resolution (default 110)
	Embed   bool     // embed pictures in report.html as data URIs (else relative files)
	Title   string   // page title (default "EMPO² training report")
	// Logf receives progress lines and warnings (nil = silent).
	Logf func(format string, args ...any)
	// Progress is called after each picture is written (all its formats):
	// done of total (nil = none).
	Progress func(done, total int)
	// Context, when set, stops Generate between pictures once it is
	// cancelled (its error is returned; report.html is not written, the
	// pictures already written are complete).
	Context context.Context
}

// Result lists what a report wrote.
type Result struct {
	HTML     string   // path of report.html
	Files    []string // picture files written (relative to Out)
	Skipped  []string // panels not drawn and why
	Warnings []string // from loading the runs
}

// metricSpec describes one metrics.jsonl field drawn as a learning curve.
type metricSpec struct {
	Key, Title, YLabel, Desc string
	Unit01                   bool // a fraction: y axis fixed to [0, 1]
}

// metricSpecs are the learning curves, in page order (metrics.jsonl fields,
// runfiles.Metrics).
var metricSpecs = []metricSpec{
	{"score_mean", "Score", "mean score", "mean final environment score of the step's training episodes", false},
	{"success_rate", "Success rate", "fraction", "fraction of the step's episodes that succeeded", true},
	{"reward_mean", "Reward", "mean reward", "mean episode reward used for advantages (final score + intrinsic memory reward)", false},
	{"loss", "Loss", "loss", "PPO/dual-clip surrogate loss of the step's update (mean over mini-batches)", false},
	{"clip_frac", "Clip fraction", "fraction", "fraction of trained tokens whose ratio was clipped (|r − 1| > ε)", false},
	{"approx_kl", "Approximate KL", "KL(π_old ‖ π)", "approximate KL divergence between the rollout policy and the updated policy", false},
	{"grad_norm", "Gradient norm", "‖g‖₂", "global L2 norm of the LoRA gradient before clipping", false},
	{"tips_retrieved_mean", "Tips retrieved", "tips per action", "mean number of tips above the similarity threshold per action (memory rollouts)", false},
	{"intrinsic_mean", "Intrinsic reward", "mean intrinsic reward", "mean intrinsic memory reward per episode (coefficient × 1/(tips retrieved + 1))", false},
	{"entropy", "Entropy", "nats per token", "mean policy entropy over trained tokens", false},
	{"lr", "Learning rate", "learning rate", "AdamW learning rate of the step (after the schedule)", false},
	{"tips_written", "Tips written", "tips", "tips (memory entries) written after the step's episodes", false},
	{"tips_true_frac", "True tips", "fraction", "fraction of the step's written tips whose every claim holds on their episode (environments.TipChecker; textlab)", true},
	{"tips_wellformed_frac", "Well-formed tips", "fraction", "fraction of the step's written tips made only of claims the environment's tip checker can read", true},
	{"masked_seqs", "Masked sequences", "sequences", "off-policy responses dropped by low-probability masking", false},
	{"trained_tokens", "Trained tokens", "tokens", "tokens that entered the update", false},
	{"rollout_tokens_per_s", "Rollout throughput", "tokens/s", "generated tokens per second of the batched rollout decode", false},
	{"env_steps_per_s", "Environment throughput", "env steps/s", "environment steps per second over the rollout phase", false},
	{stepTimeKey, "Step time", "seconds", "seconds per step (t_step as written by train; else the sum of the phase times t_rollout + t_embed_retrieve + t_tips + t_old_logp + t_update)", false},
}

// phases are the per-phase seconds of a step (metrics.jsonl t_* fields).
var phases = []struct{ Key, Label string }{
	{"t_rollout", "rollout"}, {"t_embed_retrieve", "embed + retrieve"}, {"t_tips", "tip writing"},
	{"t_old_logp", "old log-probs"}, {"t_update", "update"},
}

const stepTimeKey = "t_step"

// overviewKeys are the panels of the overview figure (those present are
// drawn) and the columns of the final-figures table.
var overviewKeys = []string{"score_mean", "success_rate", "reward_mean", "loss", "approx_kl", "tips_retrieved_mean"}

// Fields of a metrics line that are not curves.
const (
	keyStep  = "step"
	keySeed  = "seed"
	keyMode  = "mode"
	keyModes = "modes"
	keyTime  = "time"
)

// drawnMetrics lists every metrics.jsonl field the report reads: the
// curves, the step-time phases, the overview and final-table columns and
// the fields it keys rows by. Each must be a JSON name of
// runfiles.Metrics (TestReportReadsTheContract).
func drawnMetrics() []string {
	keys := []string{keyStep, keySeed, keyMode, keyModes, keyTime}
	for _, m := range metricSpecs {
		keys = append(keys, m.Key)
	}
	for _, ph := range phases {
		keys = append(keys, ph.Key)
	}
	return append(keys, overviewKeys...)
}

// Figure sizes.
var (
	figW, figH           = 8 * vg.Inch, 4 * vg.Inch
	overviewW, overviewH = 12 * vg.Inch, 6.5 * vg.Inch
)

// Generate loads the run directories, writes the pictures and report.html
// into opt.Out and returns what it wrote.
func Generate(dirs []string, opt Options) (*Result, error) {
	if len(dirs) == 0 {
		return nil, fmt.Errorf("%w: no run directory given", ErrOptions)
	}
	if err := opt.normalize(); err != nil {
		return nil, err
	}
	var runs []*Run
	seen := map[string]bool{}
	for _, d := range dirs {
		r, err := LoadRun(d)
		if err != nil {
			return nil, err
		}
		key, _ := filepath.Abs(r.Dir)
		if seen[key] { // the same run given twice
			continue
		}
		seen[key] = true
		runs = append(runs, r)
	}
	disambiguate(runs)
	if err := os.MkdirAll(opt.Out, 0o755); err != nil {
		return nil, fmt.Errorf("%w: --out %s: %v", ErrOptions, opt.Out, err)
	}
	b := &builder{opt: opt, runs: runs, groups: GroupRuns(runs)}
	b.window = opt.Smooth
	if b.window == 0 {
		maxSteps := 0
		for _, r := range runs {
			maxSteps = max(maxSteps, len(r.Metrics))
		}
		b.window = min(50, max(1, int(math.Round(float64(maxSteps)/10))))
	}
	for _, r := range runs {
		b.res.Warnings = append(b.res.Warnings, r.Warnings...)
		deriveStepTime(r)
	}
	for _, w := range b.res.Warnings {
		opt.logf("warning: %s", w)
	}
	page, err := b.build()
	if err != nil {
		return nil, err
	}
	if err := b.render(); err != nil {
		return nil, err
	}
	if err := opt.cancelled(); err != nil {
		return nil, err
	}
	b.res.HTML, err = writeHTML(opt, page)
	if err != nil {
		return nil, err
	}
	return &b.res, nil
}

// cancelled is the error of a cancelled Context (nil without one).
func (o *Options) cancelled() error {
	if o.Context == nil {
		return nil
	}
	return o.Context.Err()
}

// disambiguate names runs that share a base name (runs/a/r, runs/b/r) by
// their parent folder too ("a/r", "b/r").
func disambiguate(runs []*Run) {
	count := map[string]int{}
	for _, r := range runs {
		count[r.Name]++
	}
	for _, r := range runs {
		if count[r.Name] > 1 {
			abs, _ := filepath.Abs(r.Dir)
			r.Name = filepath.Join(filepath.Base(filepath.Dir(abs)), filepath.Base(abs))
		}
	}
}

func (o *Options) normalize() error {
	if o.Out == "" {
		return fmt.Errorf("%w: no output directory", ErrOptions)
	}
	if o.Smooth < 0 {
		return fmt.Errorf("%w: smoothing window %d < 0", ErrOptions, o.Smooth)
	}
	if len(o.Formats) == 0 {
		o.Formats = []string{"png", "svg"}
	}
	seen := map[string]bool{}
	var fs []string
	for _, f := range o.Formats {
		f = strings.ToLower(strings.TrimSpace(f))
		if f != "png" && f != "svg" {
			return fmt.Errorf("%w: format %q (want png, svg)", ErrOptions, f)
		}
		if !seen[f] {
			seen[f] = true
			fs = append(fs, f)
		}
	}
	o.Formats = fs
	if o.DPI == 0 {
		o.DPI = 110
	}
	if o.DPI < 30 || o.DPI > 600 {
		return fmt.Errorf("%w: dpi %d (want 30..600)", ErrOptions, o.DPI)
	}
	if o.Title == "" {
		o.Title = "EMPO² training report"
	}
	return nil
}

func (o *Options) logf(format string, args ...any) {
	if o.Logf != nil {
		o.Logf(format, args...)
	}
}

// deriveStepTime adds t_step (the sum of the phase seconds present) to every row.
func deriveStepTime(r *Run) {
	for _, row := range r.Metrics {
		sum, found := 0.0, false
		for _, ph := range phases {
			if v, ok := row.Values[ph.Key]; ok {
				sum += v
				found = true
			}
		}
		if found {
			if _, ok := row.Values[stepTimeKey]; !ok {
				row.Values[stepTimeKey] = sum
			}
		}
	}
}

type builder struct {
	opt     Options
	runs    []*Run
	groups  []*Group
	window  int
	res     Result
	pending []*figure           // built, not yet written
	notes   map[string][]string // skipped panels by page section
}

// skip records a panel that is not drawn, under its page section.
func (b *builder) skip(section, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.res.Skipped = append(b.res.Skipped, msg)
	if b.notes == nil {
		b.notes = map[string][]string{}
	}
	b.notes[section] = append(b.notes[section], msg)
	b.opt.logf("skipped: %s", msg)
}

// emit queues a figure for rendering (render draws them all, with progress)
// and returns its entry on the page.
func (b *builder) emit(f *figure) (*pageFigure, error) {
	b.pending = append(b.pending, f)
	var names []string
	for _, format := range b.opt.Formats {
		names = append(names, f.Name+"."+format)
	}
	return &pageFigure{Name: f.Name, Title: f.Title, Caption: f.Caption, Files: names}, nil
}

// render writes every queued figure in every format.
func (b *builder) render() error {
	for i, f := range b.pending {
		if err := b.opt.cancelled(); err != nil {
			return err
		}
		names, err := f.write(b.opt.Out, b.opt.Formats, b.opt.DPI)
		if err != nil {
			return err
		}
		b.res.Files = append(b.res.Files, names...)
		b.opt.logf("wrote %s", strings.Join(names, ", "))
		if b.opt.Progress != nil {
			b.opt.Progress(i+1, len(b.pending))
		}
	}
	return nil
}

func singleFigure(name, title, caption string, p *plot.Plot, l *legend) *figure {
	return &figure{Name: name, Title: title, Caption: caption, Plots: [][]*plot.Plot{{p}}, Legend: l, W: figW, H: figH}
}

// groupCurve builds a group's curve of a metrics field: per run the raw series
// and its moving average; drawn as the mean over runs (bold), the min–max band
// of the smoothed runs, and the raw mean (faint) when smoothing is on.
func (b *builder) groupCurve(g *Group, key string, col int) (curve, bool) {
	var xs, raw, sm [][]float64
	for _, r := range g.Runs {
		x, y := r.Series(key)
		if len(x) == 0 {
			continue
		}
		xs = append(xs, x)
		raw = append(raw, y)
		sm = append(sm, smooth(y, b.window))
	}
	if len(xs) == 0 {
		return curve{}, false
	}
	c := curve{Label: g.Label, Color: paletteColor(col)}
	agg := aggregate(xs, sm)
	c.Line = toXYs(agg.X, agg.Mean)
	if len(xs) > 1 {
		c.Lo, c.Hi = agg.Lo, agg.Hi
	}
	if b.window > 1 {
		ra := aggregate(xs, raw)
		c.Raw = toXYs(ra.X, ra.Mean)
	}
	c.Points = len(c.Line) <= 12 // a short run: mark every step
	return c, true
}

func toXYs(x, y []float64) plotter.XYs {
	xy := make(plotter.XYs, len(x))
	for i := range x {
		xy[i] = plotter.XY{X: x[i], Y: y[i]}
	}
	return xy
}

func (b *builder) metricChart(m metricSpec) (lineChart, bool) {
	lc := lineChart{Title: m.Title, XLabel: "training step", YLabel: m.YLabel, YMin: math.NaN(), YMax: math.NaN(), IntegerX: true}
	if m.Unit01 { // a fraction: [0, 1] with the same 4 % headroom as other panels
		lc.YMin, lc.YMax = -0.04, 1.04
	}
	for i, g := range b.groups {
		if c, ok := b.groupCurve(g, m.Key, i); ok {
			lc.Curves = append(lc.Curves, c)
		}
	}
	return lc, len(lc.Curves) > 0
}

func (b *builder) smoothingNote() string {
	if b.window <= 1 {
		return "no smoothing"
	}
	return fmt.Sprintf("bold: moving average over %d steps, faint: raw", b.window)
}

func (b *builder) build() (*page, error) {
	pg := &page{Title: b.opt.Title, Window: b.window, SmoothingNote: b.smoothingNote(), Embed: b.opt.Embed}
	for i, g := range b.groups {
		pg.Groups = append(pg.Groups, pageGroup{Label: g.Label, Color: hexColor(paletteColor(i)), Runs: runNames(g.Runs), Seeds: g.Seeds(), Differs: strings.Join(g.Differs, ", ")})
	}
	for _, m := range metricSpecs {
		pg.Metrics = append(pg.Metrics, pageMetric{Key: m.Key, Title: m.Title, Desc: m.Desc})
	}
	b.finalTable(pg)

	// Overview: the key curves in one picture (also the README's example).
	var panels []*plot.Plot
	var leg *legend
	for _, k := range overviewKeys {
		m := specOf(k)
		lc, ok := b.metricChart(m)
		if !ok {
			continue
		}
		p, l, err := lc.plot()
		if err != nil {
			return nil, err
		}
		if leg == nil || l.n > leg.n {
			leg = l
		}
		panels = append(panels, p)
	}
	if len(panels) > 0 {
		cols := min(3, len(panels))
		rows := (len(panels) + cols - 1) / cols
		grid := make([][]*plot.Plot, rows)
		for i := range grid {
			grid[i] = make([]*plot.Plot, cols)
		}
		for i, p := range panels {
			grid[i/cols][i%cols] = p
		}
		h := overviewH
		if rows == 1 {
			h = overviewH * 0.55
		}
		f := &figure{Name: "overview", Title: "Overview", Caption: "The main learning curves of every run group (" + b.smoothingNote() + "; band: min–max over seeds).",
			Plots: grid, Legend: leg, W: overviewW, H: h}
		pf, err := b.emit(f)
		if err != nil {
			return nil, err
		}
		pf.Points = b.points(overviewKeys...)
		pg.Overview = pf
	} else {
		b.skip("overview", "overview: no run has metrics (no metrics.jsonl or none of %s)", strings.Join(overviewKeys, ", "))
	}

	// One figure per learning curve.
	for _, m := range metricSpecs {
		lc, ok := b.metricChart(m)
		if !ok {
			b.skip("curves", "%s (%s): no run has this field", m.Title, m.Key)
			continue
		}
		p, l, err := lc.plot()
		if err != nil {
			return nil, err
		}
		pf, err := b.emit(singleFigure("curve-"+m.Key, m.Title, m.Desc+" ("+b.smoothingNote()+").", p, l))
		if err != nil {
			return nil, err
		}
		pf.Points = b.points(m.Key)
		pg.Curves = append(pg.Curves, *pf)
	}

	if err := b.modeMix(pg); err != nil {
		return nil, err
	}
	if err := b.phaseTimes(pg); err != nil {
		return nil, err
	}
	if err := b.periodicEval(pg); err != nil {
		return nil, err
	}
	if err := b.evalFiles(pg); err != nil {
		return nil, err
	}
	if err := b.ood(pg); err != nil {
		return nil, err
	}
	pg.Notes = b.notes
	pg.Warnings = b.res.Warnings
	return pg, nil
}

// points counts the (run, step) values of the fields that a figure draws
// (the page's data-points: a live page's figure grows with it).
func (b *builder) points(keys ...string) int {
	n := 0
	for _, r := range b.runs {
		for _, k := range keys {
			xs, _ := r.Series(k)
			n += len(xs)
		}
	}
	return n
}

func specOf(key string) metricSpec {
	for _, m := range metricSpecs {
		if m.Key == key {
			return m
		}
	}
	panic("report: unknown metric " + key)
}

func runNames(rs []*Run) string {
	var s []string
	for _, r := range rs {
		s = append(s, r.Name)
	}
	return strings.Join(s, ", ")
}

// lastMean is the mean of the last w values of a run's field (NaN if none).
func lastMean(r *Run, key string, w int) float64 {
	_, ys := r.Series(key)
	if len(ys) == 0 {
		return math.NaN()
	}
	ys = ys[max(0, len(ys)-max(w, 1)):]
	s := 0.0
	for _, y := range ys {
		s += y
	}
	return s / float64(len(ys))
}

func (b *builder) finalTable(pg *page) {
	keys := overviewKeys
	t := table{ID: "final-figures", Caption: fmt.Sprintf("Final figures per run: mean of the last %d step(s); last periodic eval", max(b.window, 1))}
	t.Head = []string{"run", "group", "seed", "steps"}
	for _, k := range keys {
		t.Head = append(t.Head, specOf(k).Title)
	}
	t.Head = append(t.Head, "eval step", "eval score (memory off)", "eval score (memory on)")
	for _, g := range b.groups {
		for _, r := range g.Runs {
			row := []string{r.Name, g.Label, "?", fmt.Sprint(len(r.Metrics))}
			if r.Seed != nil {
				row[2] = fmt.Sprint(*r.Seed)
			}
			for _, k := range keys {
				row = append(row, fmtNum(lastMean(r, k, b.window)))
			}
			if n := len(r.Evals); n > 0 {
				e := r.Evals[n-1]
				row = append(row, fmtNum(e.Step), fmtPtr(sideScore(e.MemoryOff)), fmtPtr(sideScore(e.MemoryOn)))
			} else {
				row = append(row, "—", "—", "—")
			}
			t.Rows = append(t.Rows, row)
		}
	}
	pg.Final = t
}

func sideScore(s *EvalSide) *float64 {
	if s == nil {
		return nil
	}
	return s.ScoreMean
}

func sideSuccess(s *EvalSide) *float64 {
	if s == nil {
		return nil
	}
	return s.SuccessRate
}

// fmtNum prints a table number with 4 significant digits ("—" for NaN).
func fmtNum(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	if v == math.Trunc(v) && math.Abs(v) < 1e9 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.4g", v)
}

func fmtPtr(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmtNum(*v)
}

// modeMix draws the fraction of steps per mode as stacked bars per group.
func (b *builder) modeMix(pg *page) error {
	counts := make([]map[string]float64, len(b.groups))
	modeSet := map[string]bool{}
	for i, g := range b.groups {
		counts[i] = map[string]float64{}
		for _, r := range g.Runs {
			for _, row := range r.Metrics {
				// A step whose mode is drawn per rollout ("modes": episodes
				// per mode) counts as fractions of one step.
				if len(row.Modes) > 0 {
					tot := 0.0
					for _, n := range row.Modes {
						tot += n
					}
					for m, n := range row.Modes {
						counts[i][m] += n / tot
						modeSet[m] = true
					}
					continue
				}
				if row.Mode != "" && row.Mode != "mixed" {
					counts[i][row.Mode]++
					modeSet[row.Mode] = true
				}
			}
		}
	}
	if len(modeSet) == 0 {
		b.skip("modes", "mode mix: no metrics row has a mode")
		return nil
	}
	modes := sortedModes(modeSet)
	bc := barChart{Title: "Mode mix", YLabel: "fraction of steps", Stacked: true, YMax: 1, Width: figW}
	t := table{ID: "modes-table", Caption: "Steps per mode (fraction of the group's steps)", Head: append([]string{"group", "steps"}, modes...)}
	for i, g := range b.groups {
		total := 0.0
		for _, n := range counts[i] {
			total += n
		}
		if total == 0 {
			continue
		}
		bc.Cats = append(bc.Cats, shortLabel(g.Label))
		row := []string{g.Label, fmt.Sprintf("%.4g", total)}
		for _, m := range modes {
			row = append(row, fmt.Sprintf("%.2f (%.4g)", counts[i][m]/total, counts[i][m]))
		}
		t.Rows = append(t.Rows, row)
	}
	for j, m := range modes {
		s := barSeries{Label: m, Color: modeColor(m, j)}
		for i := range b.groups {
			total := 0.0
			for _, n := range counts[i] {
				total += n
			}
			if total > 0 {
				s.Values = append(s.Values, counts[i][m]/total)
			}
		}
		bc.Series = append(bc.Series, s)
	}
	p, l, err := bc.plot()
	if err != nil {
		return err
	}
	pf, err := b.emit(singleFigure("mode-mix", "Mode mix", "Fraction of training steps in each rollout/update mode, per group (EMPO² draws the mode once per step).", p, l))
	if err != nil {
		return err
	}
	pg.ModeMix, pg.ModeTable = pf, &t
	return nil
}

// knownModes fixes the order and colours of the EMPO² modes (metrics.jsonl
// "mode", trainer.Mode).
var knownModes = []string{"on-policy", "on-policy-tips", "off-policy"}

func sortedModes(set map[string]bool) []string {
	var out []string
	for _, m := range knownModes {
		if set[m] {
			out = append(out, m)
		}
	}
	var rest []string
	for m := range set {
		if !containsStr(knownModes, m) {
			rest = append(rest, m)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

func modeColor(m string, j int) color.NRGBA {
	for i, k := range knownModes {
		if k == m {
			return palette[[]int{0, 2, 1}[i]]
		}
	}
	return paletteColor(3 + j)
}

func containsStr(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// shortLabel keeps bar-axis labels readable.
func shortLabel(s string) string {
	r := []rune(s)
	if len(r) > 30 { // keep both ends: run names lead, step numbers trail
		return string(r[:12]) + "…" + string(r[len(r)-17:])
	}
	return s
}

// phaseTimes draws the mean seconds per step of each phase as stacked bars per group.
func (b *builder) phaseTimes(pg *page) error {
	bc := barChart{Title: "Time per phase", YLabel: "seconds per step (mean)", Stacked: true, YMax: math.NaN(), Width: figW}
	t := table{ID: "phases-table", Caption: "Mean seconds per step by phase", Head: []string{"group"}}
	var present []int
	for j, ph := range phases {
		for _, r := range b.runs {
			if r.Has(ph.Key) {
				present = append(present, j)
				break
			}
		}
	}
	if len(present) == 0 {
		b.skip("phases", "time per phase: no run has t_rollout, t_embed_retrieve, t_tips or t_update")
		return nil
	}
	for _, j := range present {
		t.Head = append(t.Head, phases[j].Label)
	}
	t.Head = append(t.Head, "total")
	var means [][]float64
	for _, g := range b.groups {
		tot, found := 0.0, false
		row := []string{g.Label}
		var ms []float64
		for _, j := range present {
			var sum float64
			n := 0
			for _, r := range g.Runs {
				_, ys := r.Series(phases[j].Key)
				for _, y := range ys {
					sum += y
					n++
				}
			}
			v := math.NaN()
			if n > 0 {
				v = sum / float64(n)
				tot += v
				found = true
			}
			ms = append(ms, v)
			row = append(row, fmtNum(v))
		}
		if !found {
			continue // a group without metrics (e.g. eval results only)
		}
		means = append(means, ms)
		t.Rows = append(t.Rows, append(row, fmtNum(tot)))
		bc.Cats = append(bc.Cats, shortLabel(g.Label))
	}
	for k, j := range present {
		s := barSeries{Label: phases[j].Label, Color: paletteColor(k + 4)}
		for i := range means {
			s.Values = append(s.Values, means[i][k])
		}
		bc.Series = append(bc.Series, s)
	}
	p, l, err := bc.plot()
	if err != nil {
		return err
	}
	pf, err := b.emit(singleFigure("time-per-phase", "Time per phase", "Mean seconds per training step in each phase, per group (the step-time curve above shows their sum over steps).", p, l))
	if err != nil {
		return err
	}
	pg.Phases, pg.PhaseTable = pf, &t
	return nil
}

// periodicEval draws eval.jsonl: score and success rate over training steps,
// memory off (solid) and on (dashed) per group, mean and min–max over seeds.
func (b *builder) periodicEval(pg *page) error {
	found := false
	for _, r := range b.runs {
		if len(r.Evals) > 0 {
			found = true
		}
	}
	if !found {
		b.skip("periodic-eval", "periodic evaluation: no run has %s", EvalLogFile)
		return nil
	}
	for _, which := range []struct {
		name, title, ylabel string
		get                 func(*EvalSide) *float64
		unit01              bool
	}{{"eval-score", "Periodic eval: score", "mean score", sideScore, false}, {"eval-success", "Periodic eval: success rate", "fraction", sideSuccess, true}} {
		lc := lineChart{Title: which.title, XLabel: "training step", YLabel: which.ylabel, YMin: math.NaN(), YMax: math.NaN(), IntegerX: true}
		if which.unit01 {
			lc.YMin, lc.YMax = -0.04, 1.04
		}
		for gi, g := range b.groups {
			for _, on := range []bool{false, true} {
				var xs, ys [][]float64
				for _, r := range g.Runs {
					var x, y []float64
					for _, e := range r.Evals {
						if v := which.get(e.Side(on)); v != nil {
							x = append(x, e.Step)
							y = append(y, *v)
						}
					}
					if len(x) > 0 {
						xs, ys = append(xs, x), append(ys, y)
					}
				}
				if len(xs) == 0 {
					continue
				}
				agg := aggregate(xs, ys)
				c := curve{Label: g.Label + memLabel(on), Color: paletteColor(gi), Dashed: on, Line: toXYs(agg.X, agg.Mean), Points: true}
				if len(xs) > 1 {
					c.Lo, c.Hi = agg.Lo, agg.Hi
				}
				lc.Curves = append(lc.Curves, c)
			}
		}
		if len(lc.Curves) == 0 {
			b.skip("periodic-eval", "%s: no eval line has this field", which.title)
			continue
		}
		p, l, err := lc.plot()
		if err != nil {
			return err
		}
		pf, err := b.emit(singleFigure(which.name, which.title, "Evaluation on the dev split during training (eval.jsonl): solid = memory off, dashed = memory on; band: min–max over seeds.", p, l))
		if err != nil {
			return err
		}
		pg.EvalCurves = append(pg.EvalCurves, *pf)
	}
	t := table{ID: "periodic-eval-table", Caption: "Periodic evaluations (eval.jsonl)", Head: []string{"run", "step", "score (memory off)", "success (memory off)", "episodes (off)", "score (memory on)", "success (memory on)", "episodes (on)"}}
	for _, r := range b.runs {
		for _, e := range r.Evals {
			t.Rows = append(t.Rows, append([]string{r.Name, fmtNum(e.Step)}, sideCells(e.EvalResult)...))
		}
	}
	pg.EvalTable = &t
	return nil
}

func memLabel(on bool) string {
	if on {
		return " · memory on"
	}
	return " · memory off"
}

func sideCells(e EvalResult) []string {
	var out []string
	for _, s := range []*EvalSide{e.MemoryOff, e.MemoryOn} {
		if s == nil {
			out = append(out, "—", "—", "—")
			continue
		}
		out = append(out, fmtPtr(s.ScoreMean), fmtPtr(s.SuccessRate), fmt.Sprint(s.Episodes))
	}
	return out
}

// evalFiles draws <run>/eval/*.json (evaluate.Report) as grouped bars, memory off
// vs on, with tables (overall and per task).
func (b *builder) evalFiles(pg *page) error {
	type entry struct {
		run  *Run
		file EvalFile
	}
	var es []entry
	for _, r := range b.runs {
		for _, f := range r.EvalFiles {
			if f.OOD == nil {
				es = append(es, entry{r, f})
			}
		}
	}
	if len(es) == 0 {
		b.skip("eval", "evaluation results: no run has %s/*.json from `empo2 eval --json`", EvalDir)
		return nil
	}
	var cats []string
	for _, e := range es {
		cats = append(cats, shortLabel(e.run.Name+"/"+e.file.Name))
	}
	for _, which := range []struct {
		name, title, ylabel, format string
		get                         func(*EvalSide) *float64
		ymax                        float64
	}{{"evalfiles-score", "Evaluation: score", "mean score", "%.1f", sideScore, math.NaN()}, {"evalfiles-success", "Evaluation: success rate", "fraction", "%.2f", sideSuccess, 1.1}} {
		bc := barChart{Title: which.title, YLabel: which.ylabel, Cats: cats, YMax: which.ymax, ValueFormat: which.format, Width: figW}
		found := false
		for si, on := range []bool{false, true} {
			s := barSeries{Label: strings.TrimPrefix(memLabel(on), " · "), Color: paletteColor([]int{7, 0}[si])}
			for _, e := range es {
				v := math.NaN()
				if p := which.get(e.file.Side(on)); p != nil {
					v, found = *p, true
				}
				s.Values = append(s.Values, v)
			}
			bc.Series = append(bc.Series, s)
		}
		if !found {
			b.skip("eval", "%s: no eval file has this field", which.title)
			continue
		}
		p, l, err := bc.plot()
		if err != nil {
			return err
		}
		pf, err := b.emit(singleFigure(which.name, which.title, "`empo2 eval --json` results found in the runs' eval/ folders: memory off vs memory on.", p, l))
		if err != nil {
			return err
		}
		pg.EvalBars = append(pg.EvalBars, *pf)
	}
	t := table{ID: "eval-files-table", Caption: "Evaluation results (eval/*.json)", Head: []string{"run", "file", "score (memory off)", "success (memory off)", "episodes (off)", "score (memory on)", "success (memory on)", "episodes (on)", "Δ score (on − off)"}}
	for _, e := range es {
		row := append([]string{e.run.Name, e.file.Name}, sideCells(e.file.EvalResult)...)
		d := "—"
		if a, c := sideScore(e.file.MemoryOff), sideScore(e.file.MemoryOn); a != nil && c != nil {
			d = fmtNum(*c - *a)
		}
		t.Rows = append(t.Rows, append(row, d))
		if tt := taskTable(e.run.Name+"/"+e.file.Name, e.file.EvalResult); tt != nil {
			pg.TaskTables = append(pg.TaskTables, *tt)
		}
	}
	pg.EvalFileTable = &t
	return nil
}

func taskTable(name string, e EvalResult) *table {
	tasks := map[string]bool{}
	for _, s := range []*EvalSide{e.MemoryOff, e.MemoryOn} {
		if s != nil {
			for k := range s.Tasks {
				tasks[k] = true
			}
		}
	}
	if len(tasks) == 0 {
		return nil
	}
	var names []string
	for k := range tasks {
		names = append(names, k)
	}
	sort.Strings(names)
	t := table{ID: "tasks-" + name, Caption: "Per task: " + name, Head: []string{"task", "score (memory off)", "success (memory off)", "episodes (off)", "score (memory on)", "success (memory on)", "episodes (on)"}}
	for _, n := range names {
		row := []string{n}
		for _, s := range []*EvalSide{e.MemoryOff, e.MemoryOn} {
			te, ok := TaskEval{}, false
			if s != nil {
				te, ok = s.Tasks[n]
			}
			if !ok {
				row = append(row, "—", "—", "—")
				continue
			}
			row = append(row, fmtPtr(te.ScoreMean), fmtPtr(te.SuccessRate), fmt.Sprint(te.Episodes))
		}
		t.Rows = append(t.Rows, row)
	}
	return &t
}

// ood draws the OOD adaptation results (evaluate.OODReport): score per trial index,
// memory on (solid) vs the no-memory control (dashed).
func (b *builder) ood(pg *page) error {
	type entry struct {
		label string
		o     *OOD
	}
	var es []entry
	for _, r := range b.runs {
		for _, f := range r.EvalFiles {
			if f.OOD != nil {
				es = append(es, entry{r.Name + "/" + f.Name, f.OOD})
			}
		}
	}
	if len(es) == 0 {
		b.skip("ood", "OOD adaptation: no run has an OOD result in %s/", EvalDir)
		return nil
	}
	t := table{ID: "ood-table", Caption: "OOD adaptation: mean score per trial (no parameter updates)", Head: []string{"result", "memory", "trials", "trial 1", "trial K", "improvement (K vs 1)"}}
	for _, which := range []struct {
		name, title, ylabel string
		get                 func(*OOD) map[bool][]float64
		unit01              bool
	}{{"ood-score", "OOD adaptation: score per trial", "mean score", func(o *OOD) map[bool][]float64 { return o.Score }, false},
		{"ood-success", "OOD adaptation: success per trial", "fraction", func(o *OOD) map[bool][]float64 { return o.Success }, true}} {
		lc := lineChart{Title: which.title, XLabel: "trial", YLabel: which.ylabel, YMin: math.NaN(), YMax: math.NaN(), IntegerX: true}
		if which.unit01 {
			lc.YMin, lc.YMax = -0.04, 1.04
		}
		for i, e := range es {
			for _, on := range []bool{true, false} {
				ys := which.get(e.o)[on]
				if len(ys) == 0 {
					continue
				}
				xs := make([]float64, len(ys))
				for k := range xs {
					xs[k] = float64(k + 1)
				}
				lc.Curves = append(lc.Curves, curve{Label: e.label + memLabel(on), Color: paletteColor(i), Dashed: !on, Line: toXYs(xs, ys), Points: true})
			}
		}
		if len(lc.Curves) == 0 {
			continue
		}
		p, l, err := lc.plot()
		if err != nil {
			return err
		}
		pf, err := b.emit(singleFigure(which.name, which.title, "Held-out tasks, K consecutive trials per variation, a tip written after each trial, no weight updates: solid = memory on, dashed = memory off (control).", p, l))
		if err != nil {
			return err
		}
		pg.OODCurves = append(pg.OODCurves, *pf)
	}
	for _, e := range es {
		for _, on := range []bool{true, false} {
			ys := e.o.Score[on]
			if len(ys) == 0 {
				continue
			}
			imp := "—"
			if ys[0] != 0 {
				imp = fmt.Sprintf("%+.0f%%", 100*(ys[len(ys)-1]-ys[0])/math.Abs(ys[0]))
			} else {
				imp = fmt.Sprintf("%+.4g", ys[len(ys)-1]-ys[0])
			}
			t.Rows = append(t.Rows, []string{e.label, strings.TrimPrefix(memLabel(on), " · "), fmt.Sprint(len(ys)), fmtNum(ys[0]), fmtNum(ys[len(ys)-1]), imp})
		}
	}
	pg.OODTable = &t
	return nil
}
