package gguf

import (
	"math"
	"math/rand/v2"
	"testing"
)

func isNaN16(h uint16) bool { return h&0x7c00 == 0x7c00 && h&0x3ff != 0 }

func TestF16AllHalvesRoundTrip(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := F16ToF32(h)
		back := F32ToF16(f)
		if isNaN16(h) {
			if !math.IsNaN(float64(f)) || !isNaN16(back) {
				t.Fatalf("NaN %#04x -> %v -> %#04x", h, f, back)
			}
			continue
		}
		if back != h {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, back)
		}
	}
}

// refF16 rounds x to the nearest half by bracketing it between consecutive
// halves (half values are monotone in their bits for positive numbers), ties
// to even.
func refF16(x float32) uint16 {
	sign := uint16(0)
	if math.Signbit(float64(x)) {
		sign = 0x8000
		x = -x
	}
	if math.IsInf(float64(x), 0) || float64(x) >= 65520 { // 65520 = halfway to 2^16, rounds to Inf
		return sign | 0x7c00
	}
	lo, hi := 0, 0x7bff
	for lo < hi { // largest h with value <= x
		mid := (lo + hi + 1) / 2
		if F16ToF32(uint16(mid)) <= x {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	h := uint16(lo)
	a := float64(F16ToF32(h))
	if float64(x) == a {
		return sign | h
	}
	b := float64(F16ToF32(h + 1))
	da, db := float64(x)-a, b-float64(x)
	if db < da || (db == da && h&1 == 1) {
		h++
	}
	return sign | h
}

func TestF16Rounding(t *testing.T) {
	cases := []struct {
		x    float32
		want uint16
	}{
		{0, 0}, {float32(math.Copysign(0, -1)), 0x8000}, {1, 0x3c00}, {-2, 0xc000},
		{65504, 0x7bff}, {65519, 0x7bff}, {65520, 0x7c00}, {1e10, 0x7c00},
		{float32(math.Inf(1)), 0x7c00}, {float32(math.Inf(-1)), 0xfc00},
		{1 + 1.0/2048, 0x3c00},           // halfway, rounds to even (down)
		{1 + 3.0/2048, 0x3c02},           // halfway, rounds to even (up)
		{float32(math.Ldexp(1, -24)), 1}, // smallest subnormal
		{float32(math.Ldexp(1, -25)), 0}, // halfway to it: even = 0
		{float32(math.Ldexp(1.5, -25)), 1},
		{float32(math.Ldexp(1, -14)), 0x0400},      // smallest normal
		{float32(math.Ldexp(1023.5, -24)), 0x0400}, // rounds up into the normals
		{1e-30, 0},
	}
	for _, c := range cases {
		if got := F32ToF16(c.x); got != c.want {
			t.Errorf("F32ToF16(%g) = %#04x, want %#04x", c.x, got, c.want)
		}
	}
	if !isNaN16(F32ToF16(float32(math.NaN()))) {
		t.Error("NaN did not stay NaN")
	}
	// a signalling NaN whose payload lives only in the low bits must not become Inf
	if h := F32ToF16(math.Float32frombits(0x7f800001)); !isNaN16(h) {
		t.Errorf("low-payload NaN -> %#04x", h)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 200000; i++ {
		var x float32
		if i%2 == 0 {
			x = math.Float32frombits(rng.Uint32())
		} else {
			x = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(12)-8)))
		}
		if math.IsNaN(float64(x)) {
			continue
		}
		if got, want := F32ToF16(x), refF16(x); got != want {
			t.Fatalf("F32ToF16(%g [%#08x]) = %#04x, want %#04x", x, math.Float32bits(x), got, want)
		}
	}
}
