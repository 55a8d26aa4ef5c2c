// Package watch carries the progress inside a long command — a training
// step's phases, the episodes of a rollout batch, the tokens generated, an
// eval, an SFT run, demonstrations — from the loops that do the work to
// whoever shows it: the terminal line, a log line per phase, the run's
// progress.json. It is a leaf: the standard library only.
//
// The loops report through the Reporter that the context carries (From;
// a no-op when none does), so that one hook reaches the rollout engine
// through every caller (train's step, its periodic eval, eval, demos)
// without each caller passing it on. A Meter is the Reporter that keeps
// the state: phase, units done of the phase's total, tokens per second,
// and the estimated time left for the step and for the run.
package watch

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Phases of a training step and of the commands around it. The first six
// are the values of progress.json's phase field (internal/progress).
const (
	Rollouts   = "rollouts"   // episodes being played (units: episodes)
	Tips       = "tips"       // tips being written into memory
	OldLogp    = "old_logp"   // π_old log-probabilities of the batch
	Update     = "update"     // the gradient update
	Eval       = "eval"       // an evaluation (units: episodes)
	Checkpoint = "checkpoint" // a checkpoint being written
	Done       = "done"       // the run finished
	SFT        = "sft"        // supervised fine-tuning (units: optimizer steps)
	Demos      = "demos"      // demonstrations (units: variations)
)

// Label is how a phase is shown on a terminal.
func Label(phase string) string {
	if phase == OldLogp {
		return "π_old"
	}
	return phase
}

// Reporter receives progress from the loops. Its methods are cheap and
// safe for concurrent use.
type Reporter interface {
	// Step says that training step step (1-based) of steps begins; it
	// ends the phase before.
	Step(step, steps int)
	// Phase begins a phase of total units (0: not known), ending the one
	// before.
	Phase(name string, total int)
	// Add reports n more units of the current phase done.
	Add(n int)
	// Tokens reports n more tokens generated (or trained, for SFT).
	Tokens(n int)
}

type ctxKey struct{}

// With returns ctx carrying r.
func With(ctx context.Context, r Reporter) context.Context {
	return context.WithValue(ctx, ctxKey{}, r)
}

// From is the Reporter ctx carries, or one that does nothing.
func From(ctx context.Context) Reporter {
	if r, ok := ctx.Value(ctxKey{}).(Reporter); ok {
		return r
	}
	return nop{}
}

type nop struct{}

func (nop) Step(int, int)     {}
func (nop) Phase(string, int) {}
func (nop) Add(int)           {}
func (nop) Tokens(int)        {}

// State is where a command stands. A negative duration is not known yet.
type State struct {
	Step, Steps int    // the training step in progress (0 outside training)
	Phase       string // "" before the first phase
	Done, Total int    // units of the phase (Total 0: not known)
	Tokens      int    // tokens of the phase
	TokensPerS  float64
	Elapsed     time.Duration // in the phase
	// ETAStep is the time left in the step (outside training: in the
	// phase); ETARun in the run (outside training: as ETAStep). Lower
	// marks estimates that leave out what no earlier step has timed yet.
	ETAStep, ETARun time.Duration
	Lower           bool
}

// Line is the state in one short line: "step 3/10 rollouts 5/8 ·
// 85 tok/s · step ETA 40s · run ETA 6m10s".
func (s State) Line() string {
	var b strings.Builder
	if s.Steps > 0 {
		fmt.Fprintf(&b, "step %d/%d ", s.Step, s.Steps)
	}
	b.WriteString(Label(s.Phase))
	if s.Total > 0 {
		fmt.Fprintf(&b, " %d/%d", s.Done, s.Total)
	} else if s.Done > 0 {
		fmt.Fprintf(&b, " %d", s.Done)
	}
	if s.Tokens > 0 {
		fmt.Fprintf(&b, " · %s tok/s", rate(s.TokensPerS))
	}
	ge := ""
	if s.Lower {
		ge = "≥"
	}
	if s.Steps > 0 {
		if s.ETAStep >= 0 {
			fmt.Fprintf(&b, " · step ETA %s%s", ge, Dur(s.ETAStep))
		}
		if s.ETARun >= 0 {
			fmt.Fprintf(&b, " · run ETA %s%s", ge, Dur(s.ETARun))
		}
	} else if s.ETAStep >= 0 {
		fmt.Fprintf(&b, " · ETA %s", Dur(s.ETAStep))
	}
	return b.String()
}

func rate(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// Dur is d rounded for people: 45s, 6m10s, 1h05m.
func Dur(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int((d + time.Second/2).Seconds()))
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
}

// PhaseEnd is a finished phase.
type PhaseEnd struct {
	Step, Steps int
	Phase       string
	Done, Total int
	Tokens      int
	Took        time.Duration
	TokensPerS  float64
	ETARun      time.Duration // after this phase (negative: not known)
}

// Meter is a Reporter that keeps the State. OnChange (every report) and
// OnPhaseEnd (once per phase) are called outside its lock, in the
// reporting goroutine; set them before the first report.
type Meter struct {
	OnChange   func(State)
	OnPhaseEnd func(PhaseEnd)

	mu                    sync.Mutex
	now                   func() time.Time
	step, steps           int
	phase                 string
	done, total, tokens   int
	phaseStart, stepStart time.Time
	stepsTimed            int
	stepsTime             time.Duration
	cur, prev             map[string]time.Duration // phase durations of this step and of the last timed one
	curOrder, prevOrder   []string
}

// NewMeter is a Meter on the wall clock.
func NewMeter() *Meter { return &Meter{now: time.Now} }

func (m *Meter) clock() time.Time {
	if m.now == nil {
		m.now = time.Now
	}
	return m.now()
}

// Step implements Reporter.
func (m *Meter) Step(step, steps int) {
	m.mu.Lock()
	t := m.clock()
	end, ok := m.endPhase(t)
	if m.step > 0 && !m.stepStart.IsZero() {
		m.stepsTimed++
		m.stepsTime += t.Sub(m.stepStart)
		m.prev, m.prevOrder = m.cur, m.curOrder
	}
	m.cur, m.curOrder = map[string]time.Duration{}, nil
	m.step, m.steps, m.stepStart = step, steps, t
	m.phase, m.done, m.total, m.tokens, m.phaseStart = "", 0, 0, 0, t
	st := m.state(t)
	m.mu.Unlock()
	m.emit(end, ok, st)
}

// Phase implements Reporter.
func (m *Meter) Phase(name string, total int) {
	m.mu.Lock()
	t := m.clock()
	end, ok := m.endPhase(t)
	if m.stepStart.IsZero() {
		m.stepStart = t
	}
	m.phase, m.done, m.total, m.tokens, m.phaseStart = name, 0, total, 0, t
	st := m.state(t)
	m.mu.Unlock()
	m.emit(end, ok, st)
}

// Add implements Reporter.
func (m *Meter) Add(n int) {
	m.mu.Lock()
	m.done += n
	st := m.state(m.clock())
	m.mu.Unlock()
	m.emit(PhaseEnd{}, false, st)
}

// Tokens implements Reporter.
func (m *Meter) Tokens(n int) {
	m.mu.Lock()
	m.tokens += n
	st := m.state(m.clock())
	m.mu.Unlock()
	m.emit(PhaseEnd{}, false, st)
}

// End ends the current phase (OnPhaseEnd) and the step; later reports
// start afresh.
func (m *Meter) End() {
	m.mu.Lock()
	t := m.clock()
	end, ok := m.endPhase(t)
	m.phase = ""
	m.mu.Unlock()
	if ok && m.OnPhaseEnd != nil {
		m.OnPhaseEnd(end)
	}
}

// State is the meter's state now.
func (m *Meter) State() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state(m.clock())
}

func (m *Meter) emit(end PhaseEnd, ended bool, st State) {
	if ended && m.OnPhaseEnd != nil {
		m.OnPhaseEnd(end)
	}
	if m.OnChange != nil {
		m.OnChange(st)
	}
}

// endPhase closes the current phase (m.mu held).
func (m *Meter) endPhase(t time.Time) (PhaseEnd, bool) {
	if m.phase == "" {
		return PhaseEnd{}, false
	}
	took := t.Sub(m.phaseStart)
	if m.cur == nil {
		m.cur = map[string]time.Duration{}
	}
	if _, seen := m.cur[m.phase]; !seen {
		m.curOrder = append(m.curOrder, m.phase)
	}
	m.cur[m.phase] += took
	e := PhaseEnd{Step: m.step, Steps: m.steps, Phase: m.phase, Done: m.done, Total: m.total, Tokens: m.tokens, Took: took}
	if s := took.Seconds(); s > 0 && m.tokens > 0 {
		e.TokensPerS = float64(m.tokens) / s
	}
	m.phase = ""
	e.ETARun = m.state(t).ETARun
	return e, true
}

// state computes the State at t (m.mu held).
func (m *Meter) state(t time.Time) State {
	el := t.Sub(m.phaseStart)
	s := State{Step: m.step, Steps: m.steps, Phase: m.phase, Done: m.done, Total: m.total, Tokens: m.tokens,
		Elapsed: el, ETAStep: -1, ETARun: -1}
	if sec := el.Seconds(); sec > 0 && m.tokens > 0 {
		s.TokensPerS = float64(m.tokens) / sec
	}
	// the current phase: from its own rate, else from the last step's time
	left := time.Duration(-1) // unknown
	switch {
	case m.phase == "", m.total > 0 && m.done >= m.total:
		left = 0
	case m.total > 0 && m.done > 0:
		left = time.Duration(float64(el) * float64(m.total-m.done) / float64(m.done))
	case m.prev[m.phase] > el:
		left = m.prev[m.phase] - el
	}
	if m.steps <= 0 { // not training: the phase is the command
		s.ETAStep, s.ETARun = left, left
		return s
	}
	// later phases of the step: as long as in the last timed step; what
	// nothing has timed yet (the first step's later phases, a phase that
	// runs longer than last time) counts 0, and the estimates are lower
	// bounds
	lower := m.prev == nil || left < 0
	left = max(left, 0)
	after := m.phase == ""
	for _, p := range m.prevOrder {
		if p == m.phase {
			after = true
			continue
		}
		if _, done := m.cur[p]; after && !done && p != Eval && p != Checkpoint {
			left += m.prev[p]
		}
	}
	s.ETAStep, s.Lower = left, lower
	per := t.Sub(m.stepStart) + left // this step's whole time, estimated
	if m.stepsTimed > 0 {
		per = m.stepsTime / time.Duration(m.stepsTimed)
	}
	s.ETARun = left + time.Duration(max(m.steps-m.step, 0))*per
	if lower { // a lower bound of 0 says nothing
		if s.ETAStep <= 0 {
			s.ETAStep = -1
		}
		if s.ETARun <= 0 {
			s.ETARun = -1
		}
	}
	return s
}
