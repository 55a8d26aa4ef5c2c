package watch

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock advances only when told.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newTestMeter() (*Meter, *fakeClock) {
	c := &fakeClock{t: time.Unix(1e9, 0)}
	return &Meter{now: c.now}, c
}
func approx(a, b time.Duration) bool { return a-b < time.Millisecond && b-a < time.Millisecond }
func want(t *testing.T, what string, got, w time.Duration) {
	t.Helper()
	if !approx(got, w) {
		t.Errorf("%s = %v, want %v", what, got, w)
	}
}

func TestFromWithoutReporterIsNoop(t *testing.T) {
	r := From(context.Background())
	r.Step(1, 2)
	r.Phase(Rollouts, 3)
	r.Add(1)
	r.Tokens(5)
	m := NewMeter()
	if From(With(context.Background(), m)) != Reporter(m) {
		t.Fatal("From does not return the Reporter With attached")
	}
}

// A two-step run: the first step's estimates come from the rollout rate
// alone (lower bounds), the second's from the first step's phase times.
func TestMeterETA(t *testing.T) {
	m, c := newTestMeter()
	var ends []PhaseEnd
	m.OnPhaseEnd = func(e PhaseEnd) { ends = append(ends, e) }
	m.Step(1, 3)
	m.Phase(Rollouts, 8)
	c.advance(10 * time.Second)
	m.Tokens(500)
	m.Add(2)
	s := m.State()
	if s.Done != 2 || s.Total != 8 || s.Phase != Rollouts || s.Step != 1 || s.Steps != 3 {
		t.Fatalf("state %+v", s)
	}
	if s.TokensPerS != 50 {
		t.Errorf("tok/s %v, want 50", s.TokensPerS)
	}
	want(t, "step ETA (rate of the rollouts)", s.ETAStep, 30*time.Second)
	if !s.Lower {
		t.Error("first step's estimate not marked as a lower bound")
	}
	// the run: this step's estimated 40 s, twice more
	want(t, "run ETA", s.ETARun, 30*time.Second+2*40*time.Second)
	line := s.Line()
	for _, w := range []string{"step 1/3", "rollouts 2/8", "50.0 tok/s", "step ETA ≥30s", "run ETA ≥1m50s"} {
		if !strings.Contains(line, w) {
			t.Errorf("line %q lacks %q", line, w)
		}
	}
	c.advance(30 * time.Second)
	m.Add(6)
	m.Phase(OldLogp, 0)
	c.advance(5 * time.Second)
	m.Phase(Update, 0)
	c.advance(15 * time.Second)
	// step 2: 60 s timed
	m.Step(2, 3)
	if len(ends) != 3 || ends[0].Phase != Rollouts || ends[0].Done != 8 || ends[0].Took != 40*time.Second ||
		ends[0].TokensPerS != 500.0/40 || ends[2].Phase != Update || ends[2].Took != 15*time.Second {
		t.Fatalf("phase ends %+v", ends)
	}
	m.Phase(Rollouts, 8)
	s = m.State()
	// nothing done yet: the rollouts take as long as last time (40 s), then π_old 5 s, update 15 s
	want(t, "step ETA", s.ETAStep, 60*time.Second)
	want(t, "run ETA", s.ETARun, 60*time.Second+60*time.Second)
	if s.Lower {
		t.Error("second step's estimate marked as a lower bound")
	}
	c.advance(10 * time.Second)
	m.Add(4) // twice as fast: 10 s left of the rollouts
	want(t, "step ETA", m.State().ETAStep, 10*time.Second+20*time.Second)
	m.Phase(Update, 0)
	c.advance(20 * time.Second) // longer than last time: not known, not negative
	if s := m.State(); s.ETAStep != -1 || !s.Lower || !approx(s.ETARun, 60*time.Second) || !strings.Contains(s.Line(), "run ETA ≥1m00s") ||
		strings.Contains(s.Line(), "step ETA") {
		t.Errorf("a late update: %+v %q", s, s.Line())
	}
	m.End()
	if e := ends[len(ends)-1]; e.Phase != Update || e.Step != 2 || e.Took != 20*time.Second {
		t.Fatalf("last phase end %+v", e)
	}
}

// Outside training the phase is the whole command.
func TestMeterCommand(t *testing.T) {
	m, c := newTestMeter()
	m.Phase(SFT, 100)
	c.advance(20 * time.Second)
	m.Add(25)
	m.Tokens(2000)
	s := m.State()
	want(t, "ETA", s.ETAStep, 60*time.Second)
	want(t, "run ETA", s.ETARun, 60*time.Second)
	if l := s.Line(); l != "sft 25/100 · 100 tok/s · ETA 1m00s" {
		t.Errorf("line %q", l)
	}
	m.Phase(Eval, 0)
	if l := m.State().Line(); l != "eval" {
		t.Errorf("line %q", l)
	}
}

// Eight episodes played side by side finish together: until one does, the
// first step's rollouts have no estimate (not "≥0s").
func TestMeterNothingKnown(t *testing.T) {
	m, c := newTestMeter()
	m.Step(1, 3)
	m.Phase(Rollouts, 8)
	c.advance(5 * time.Second)
	m.Tokens(100)
	s := m.State()
	if s.ETAStep != -1 || !s.Lower {
		t.Errorf("state %+v", s)
	}
	want(t, "run ETA (two more steps at least as long as this one so far)", s.ETARun, 10*time.Second)
	if l := s.Line(); l != "step 1/3 rollouts 0/8 · 20.0 tok/s · run ETA ≥10s" {
		t.Errorf("line %q", l)
	}
}

func TestLabelAndDur(t *testing.T) {
	if Label(OldLogp) != "π_old" || Label(Update) != "update" {
		t.Error(Label(OldLogp))
	}
	for d, w := range map[time.Duration]string{0: "0s", 1499 * time.Millisecond: "1s", 61 * time.Second: "1m01s",
		3700 * time.Second: "1h02m"} {
		if g := Dur(d); g != w {
			t.Errorf("Dur(%v) = %q, want %q", d, g, w)
		}
	}
}

// Reports from several goroutines (eval rollouts may run beside each
// other) are counted once each.
func TestConcurrentMeterReports(t *testing.T) {
	m := NewMeter()
	calls := 0
	var mu sync.Mutex
	m.OnChange = func(State) { mu.Lock(); calls++; mu.Unlock() }
	m.Phase(Eval, 400)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				m.Add(1)
				m.Tokens(3)
			}
		}()
	}
	wg.Wait()
	if s := m.State(); s.Done != 400 || s.Tokens != 1200 || calls != 801 {
		t.Fatalf("state %+v, %d calls", s, calls)
	}
}
