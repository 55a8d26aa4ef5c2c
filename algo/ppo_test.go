package algo

import (
	"math"
	"testing"
)

func TestPPOValidate(t *testing.T) {
	if err := DefaultPPO().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []PPO{{0, 0, 0}, {0.999, 10, 1.0001}} {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
	nan := float32(math.NaN())
	for _, p := range []PPO{{-0.1, 0.3, 10}, {1, 0.3, 10}, {0.2, -0.1, 10}, {0.2, 0.3, 1}, {0.2, 0.3, 0.5}, {nan, 0.3, 10}, {0.2, float32(math.Inf(1)), 10}} {
		if err := p.Validate(); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}

// TestPPOToken checks the per-token loss against the textbook formulas and
// its derivative against a float64 central difference away from the kinks.
func TestPPOToken(t *testing.T) {
	p := DefaultPPO() // ε 0.2/0.3, dual clip 10
	cases := []struct {
		lr, adv       float64 // log-ratio, advantage
		loss          float64
		clipped, dual bool
	}{
		{0, 1, -1, false, false},                  // r = 1
		{math.Log(2), 1, -1.3, true, false},       // A > 0, r > 1+ε_high: clipped at 1.3
		{math.Log(0.5), 1, -0.5, false, false},    // A > 0, r < 1−ε_low: unclipped (min picks r·A)
		{math.Log(0.5), -1, 0.8, true, false},     // A < 0, r < 1−ε_low: clipped at 0.8
		{math.Log(2), -1, 2, false, false},        // A < 0, r = 2: unclipped
		{math.Log(20), -1, 10, false, true},       // A < 0, r = 20 > c: dual clip −c·A
		{math.Log(1.1), 0.5, -0.55, false, false}, // inside the trust region
		{30, 1, -1.3, true, false},                // huge ratio, A > 0: clipped, finite
		{-30, -2, 1.6, true, false},               // tiny ratio, A < 0: clipped, finite
		{30, -1, 10, false, true},                 // huge ratio, A < 0: dual clip, finite
	}
	for _, c := range cases {
		old := -2.0
		loss, d, clipped, dual := p.Token(old+c.lr, old, c.adv)
		if math.Abs(loss-c.loss) > 1e-6 || clipped != c.clipped || dual != c.dual {
			t.Errorf("lr=%.3f A=%v: loss %.6f clipped %v dual %v; want %.6f %v %v", c.lr, c.adv, loss, clipped, dual, c.loss, c.clipped, c.dual)
		}
		if math.IsNaN(d) || math.IsInf(d, 0) || ((clipped || dual) && d != 0) {
			t.Errorf("lr=%v: derivative %v", c.lr, d)
		}
	}
	for _, lr := range []float64{-1.5, -0.5, -0.1, 0, 0.1, 0.4, 1.5, 2.5, 3} {
		for _, adv := range []float64{-1.3, -0.4, 0.6, 2} {
			old := -3.0
			f := func(lp float64) float64 { l, _, _, _ := p.Token(lp, old, adv); return l }
			const h = 1e-6
			fd := (f(old+lr+h) - f(old+lr-h)) / (2 * h)
			if _, d, _, _ := p.Token(old+lr, old, adv); math.Abs(fd-d) > 1e-6*math.Max(1, math.Abs(fd)) {
				t.Errorf("lr=%v A=%v: dℓ/dlogp %v, central difference %v", lr, adv, d, fd)
			}
		}
	}
	// dual clip off: a negative advantage's loss grows with r unbounded
	if l, _, _, dual := (PPO{ClipLow: 0.2, ClipHigh: 0.3}).Token(math.Log(20), 0, -1); math.Abs(l-20) > 1e-9 || dual {
		t.Errorf("dual clip off: loss %v dual %v", l, dual)
	}
}

// verlPolicyLoss is an independent transcription of verl's
// compute_policy_loss (vanilla PPO with dual clip) for one token:
//
//	l1 = −A·r, l2 = −A·clip(r, 1−ε_low, 1+ε_high), lc = max(l1, l2)
//	l3 = −A·c; loss = A < 0 ? min(lc, l3) : lc
func verlPolicyLoss(logp, old, adv, epsLow, epsHigh, c float64) float64 {
	lr := math.Max(-20, math.Min(20, logp-old))
	r := math.Exp(lr)
	l1 := -adv * r
	l2 := -adv * math.Max(1-epsLow, math.Min(1+epsHigh, r))
	lc := math.Max(l1, l2)
	if adv < 0 {
		return math.Min(lc, -adv*c)
	}
	return lc
}

// TestPPOTokenMatchesVerl compares Token's loss with the verl transcription
// on a grid spanning every region (both signs of A, ratios from e^-25 to
// e^25), and its derivative with a central difference of the verl loss
// wherever the grid point is away from a kink.
func TestPPOTokenMatchesVerl(t *testing.T) {
	p := DefaultPPO()
	el, eh, c := float64(p.ClipLow), float64(p.ClipHigh), float64(p.DualClip)
	kinks := []float64{math.Log(1 - el), math.Log(1 + eh), math.Log(c), 20, -20}
	n := 0
	for lr := -25.0; lr <= 25; lr += 0.037 {
		for _, adv := range []float64{-3, -1, -0.25, 0.25, 1, 3} {
			old := -4.0
			loss, d, _, _ := p.Token(old+lr, old, adv)
			want := verlPolicyLoss(old+lr, old, adv, el, eh, c)
			if math.Abs(loss-want) > 1e-12*math.Max(1, math.Abs(want)) {
				t.Fatalf("lr=%v A=%v: loss %v, verl %v", lr, adv, loss, want)
			}
			near := false
			for _, k := range kinks {
				near = near || math.Abs(lr-k) < 1e-3
			}
			if near {
				continue
			}
			const h = 1e-6
			fd := (verlPolicyLoss(old+lr+h, old, adv, el, eh, c) - verlPolicyLoss(old+lr-h, old, adv, el, eh, c)) / (2 * h)
			if math.Abs(fd-d) > 1e-5*math.Max(1, math.Abs(fd)) {
				t.Fatalf("lr=%v A=%v: dℓ/dlogp %v, verl central difference %v", lr, adv, d, fd)
			}
			n++
		}
	}
	t.Logf("%d grid points checked", n)
}
