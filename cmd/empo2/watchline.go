package main

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog/log"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/empo2/empo2/internal/progress"
	"github.com/empo2/empo2/internal/watch"
)

// progressLine shows the progress inside a long command (internal/watch):
// on a terminal in its progress bar's line — phase, units done of the
// phase, tokens per second, the time left for the step and the run —
// refreshed every second; off a terminal one structured log line per
// phase end. With a run directory it also keeps RUN_DIR/progress.json
// (internal/progress) for the live dashboard.
type progressLine struct {
	meter *watch.Meter
	tty   bool
	dir   string // run directory of progress.json ("": none)

	mu        sync.Mutex
	bar       *progressbar.ProgressBar
	suffix    string    // after the live part (train: the last step's numbers)
	countDone bool      // the bar counts the phase's units (else the caller moves it: train's steps)
	lastFile  time.Time // of progress.json
	filePhase string    // of the last progress.json write
	stop      chan struct{}
	stopped   chan struct{}
}

// progressFileEvery spaces progress.json's rewrites within a phase.
const progressFileEvery = time.Second

// newProgressLine is the progress of a command on stderr; dir is the run
// directory whose progress.json it keeps ("" for none).
func newProgressLine(dir string) *progressLine {
	p := &progressLine{meter: watch.NewMeter(), tty: term.IsTerminal(int(os.Stderr.Fd())), dir: dir}
	p.meter.OnChange = p.changed
	p.meter.OnPhaseEnd = p.phaseEnd
	return p
}

// attach returns ctx carrying the meter: the loops below report to it.
func (p *progressLine) attach(ctx context.Context) context.Context { return watch.With(ctx, p.meter) }

// newBar makes the command's bar of max units on a terminal (nil
// elsewhere) and refreshes its line every second until finish.
func (p *progressLine) newBar(max int64, desc string) *progressbar.ProgressBar {
	if !p.tty || max <= 0 {
		return nil
	}
	bar := progressbar.NewOptions64(max, progressbar.OptionSetWriter(os.Stderr), progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(), progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
	p.mu.Lock()
	p.bar = bar
	if p.stop == nil {
		p.stop, p.stopped = make(chan struct{}), make(chan struct{})
		go p.tick(p.stop, p.stopped)
	}
	p.mu.Unlock()
	return bar
}

func (p *progressLine) tick(stop, stopped chan struct{}) {
	defer close(stopped)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			p.describe(p.meter.State())
		}
	}
}

// phase begins a command's phase of total units (eval: episodes; sft:
// optimizer steps; env demos: variations), with a bar on a terminal that
// counts them.
func (p *progressLine) phase(name string, total int) {
	p.mu.Lock()
	had := p.bar != nil
	p.countDone = true
	p.mu.Unlock()
	if !had {
		p.newBar(int64(total), name)
	}
	p.meter.Phase(name, total)
}

// setSuffix sets what the line shows after the live part.
func (p *progressLine) setSuffix(s string) {
	p.mu.Lock()
	p.suffix = s
	p.mu.Unlock()
	p.describe(p.meter.State())
}

func (p *progressLine) describe(st watch.State) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar == nil || st.Phase == "" {
		return
	}
	line := st.Line()
	if p.suffix != "" {
		line += " | " + p.suffix
	}
	p.bar.Describe(line)
	if p.countDone {
		_ = p.bar.Set(st.Done)
	}
}

func (p *progressLine) changed(st watch.State) {
	p.describe(st)
	p.writeFile(st, false)
}

// writeFile rewrites progress.json at a phase change, else at most every
// progressFileEvery (force: always).
func (p *progressLine) writeFile(st watch.State, force bool) {
	if p.dir == "" || st.Phase == "" {
		return
	}
	p.mu.Lock()
	if !force && st.Phase == p.filePhase && time.Since(p.lastFile) < progressFileEvery {
		p.mu.Unlock()
		return
	}
	p.filePhase, p.lastFile = st.Phase, time.Now()
	p.mu.Unlock()
	pr := progress.Progress{Step: st.Step, Phase: st.Phase, EpisodesDone: st.Done, EpisodesTotal: st.Total, TokensPerS: st.TokensPerS}
	if st.Phase != watch.Rollouts && st.Phase != watch.Eval { // units that are not episodes
		pr.EpisodesDone, pr.EpisodesTotal = 0, 0
	}
	if st.ETAStep > 0 {
		pr.ETAStepS = st.ETAStep.Seconds()
	}
	if st.ETARun > 0 {
		pr.ETARunS = st.ETARun.Seconds()
	}
	if err := progress.WriteFile(p.dir, pr); err != nil {
		log.Debug().Err(err).Msg("progress.json") // a hint for watchers: never fails the run
	}
}

// phaseEnd logs a finished phase off a terminal.
func (p *progressLine) phaseEnd(e watch.PhaseEnd) {
	if p.tty {
		return
	}
	ev := log.Info().Str("phase", e.Phase)
	if e.Steps > 0 {
		ev = ev.Int("step", e.Step).Int("steps", e.Steps)
	}
	if e.Total > 0 || e.Done > 0 {
		ev = ev.Int("done", e.Done).Int("total", e.Total)
	}
	if e.Tokens > 0 {
		ev = ev.Int("tokens", e.Tokens).Float64("tokens_per_s", float64(int(e.TokensPerS*10))/10)
	}
	ev = ev.Str("took", logDur(e.Took))
	if e.ETARun >= 0 && e.Steps > 0 {
		ev = ev.Str("eta_run", watch.Dur(e.ETARun))
	}
	ev.Msg("phase done")
}

// clear erases the bar's line (before a command prints between its updates).
func (p *progressLine) clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		_ = p.bar.Clear()
	}
}

// finish ends the last phase, stops the refresh and the bar; complete
// marks progress.json done (a run that ran to its end).
func (p *progressLine) finish(complete bool) {
	p.meter.End()
	p.mu.Lock()
	stop, stopped, bar := p.stop, p.stopped, p.bar
	p.stop, p.bar = nil, nil
	p.mu.Unlock()
	if stop != nil {
		close(stop)
		<-stopped
	}
	if bar != nil {
		_ = bar.Finish()
	}
	if complete && p.dir != "" {
		st := p.meter.State()
		if err := progress.WriteFile(p.dir, progress.Progress{Step: st.Step, Phase: progress.PhaseDone}); err != nil {
			log.Debug().Err(err).Msg("progress.json")
		}
	}
}
