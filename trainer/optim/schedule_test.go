package optim

import (
	"errors"
	"math"
	"testing"
)

func TestScheduleValues(t *testing.T) {
	c := Schedule{Kind: ScheduleConstant, BaseLR: 1e-3, Warmup: 3}
	for s, want := range []float64{0.25e-3, 0.5e-3, 0.75e-3, 1e-3, 1e-3, 1e-3} {
		if got := c.LR(int64(s)); math.Abs(got-want) > 1e-15 {
			t.Errorf("constant LR(%d) = %v, want %v", s, got, want)
		}
	}
	cos := Schedule{Kind: ScheduleCosine, BaseLR: 1, MinLR: 0.1, Warmup: 1, Total: 5}
	// s=0: warmup 1/2; s=1: progress 0 → 1; s=2, 3: progress 1/3, 2/3;
	// s=4, the last of Total = 5 updates: progress 1 → min 0.1 (issue 36
	// (d): it was 3/4); beyond Total: stays 0.1.
	cases := map[int64]float64{
		0: 0.5,
		1: 1,
		2: 0.1 + 0.9*0.5*(1+math.Cos(math.Pi/3)),
		3: 0.1 + 0.9*0.5*(1+math.Cos(2*math.Pi/3)),
		4: 0.1,
		5: 0.1,
		9: 0.1,
	}
	for s, want := range cases {
		if got := cos.LR(s); math.Abs(got-want) > 1e-12 {
			t.Errorf("cosine LR(%d) = %v, want %v", s, got, want)
		}
	}
	noWarm := Schedule{Kind: ScheduleCosine, BaseLR: 2, Total: 4}
	if got := noWarm.LR(0); got != 2 {
		t.Errorf("cosine without warmup LR(0) = %v, want 2", got)
	}
	if got := noWarm.LR(3); got != 0 {
		t.Errorf("cosine without warmup, last update LR(3) = %v, want min_lr 0", got)
	}
	one := Schedule{Kind: ScheduleCosine, BaseLR: 2, MinLR: 1, Warmup: 2, Total: 3}
	if got := one.LR(2); got != 2 {
		t.Errorf("a single update after warmup: LR(2) = %v, want base 2", got)
	}
}

func TestScheduleValidate(t *testing.T) {
	bad := []Schedule{
		{Kind: "linear", BaseLR: 1},
		{Kind: ScheduleConstant, BaseLR: 0},
		{Kind: ScheduleConstant, BaseLR: 1, Warmup: -1},
		{Kind: ScheduleCosine, BaseLR: 1, Warmup: 5, Total: 5},
		{Kind: ScheduleCosine, BaseLR: 1, MinLR: 2, Total: 5},
	}
	for _, s := range bad {
		if err := s.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v accepted: %v", s, err)
		}
	}
	if err := (Schedule{Kind: ScheduleCosine, BaseLR: 1, Total: 10, Warmup: 2}).Validate(); err != nil {
		t.Errorf("good schedule rejected: %v", err)
	}
}

// TestLRAt: the warmup factor times the cosine at the given progress; LR
// is LRAt at the update index's own progress.
func TestLRAt(t *testing.T) {
	s := Schedule{Kind: ScheduleCosine, BaseLR: 1, MinLR: 0.1, Warmup: 3, Total: 13}
	for _, c := range []struct {
		step int64
		p    float64
		want float64
	}{
		{0, 0, 0.25}, {2, 0, 0.75}, {3, 0, 1}, {100, 0, 1}, {100, 0.5, 0.55}, {100, 1, 0.1}, {100, 2, 0.1}, {0, 1, 0.025}, {5, -1, 1},
	} {
		if got := s.LRAt(c.step, c.p); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("LRAt(%d, %v) = %v, want %v", c.step, c.p, got, c.want)
		}
	}
	for step := int64(0); step < 20; step++ {
		p := float64(step-3) / 9
		if a, b := s.LR(step), s.LRAt(step, p); a != b {
			t.Errorf("LR(%d) = %v, LRAt = %v", step, a, b)
		}
	}
	c := Schedule{Kind: ScheduleConstant, BaseLR: 2, Warmup: 1}
	if c.LRAt(0, 0.9) != 1 || c.LRAt(1, 0.9) != 2 {
		t.Errorf("constant: %v %v", c.LRAt(0, 0.9), c.LRAt(1, 0.9))
	}
}
