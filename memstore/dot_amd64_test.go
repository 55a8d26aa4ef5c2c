package memstore

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/cpu"
)

func useAVX2Kernel() bool { return useAVX2 }

// TestAVX2KernelSelection: the assembly kernel is chosen exactly when the
// CPU (and OS) support AVX2 and FMA.
func TestAVX2KernelSelection(t *testing.T) {
	assert.Equal(t, cpu.X86.HasAVX2 && cpu.X86.HasFMA, useAVX2)
}

// TestDotAVX2MatchesGo calls the assembly kernel directly on random data of
// every length 0..300 (all remainders mod 8 and 32) at unaligned offsets,
// against the pure-Go kernel and a float64 reference. The elements just
// outside [off, off+n) are NaN, so any read past either end shows.
func TestDotAVX2MatchesGo(t *testing.T) {
	if !(cpu.X86.HasAVX2 && cpu.X86.HasFMA) {
		t.Skip("CPU lacks AVX2/FMA: the assembly kernel is never used here")
	}
	rng := newRand(11)
	nan := float32(math.NaN())
	for n := 0; n <= 300; n++ {
		for rep := 0; rep < 3; rep++ {
			offA, offB := 1+rng.Intn(8), 1+rng.Intn(8)
			a := make([]float32, offA+n+9)
			b := make([]float32, offB+n+9)
			for i := range a {
				a[i] = nan
			}
			for i := range b {
				b[i] = nan
			}
			var want, mag float64
			for i := 0; i < n; i++ {
				x, y := float32(rng.NormFloat64()), float32(rng.NormFloat64())
				a[offA+i], b[offB+i] = x, y
				want += float64(x) * float64(y)
				mag += math.Abs(float64(x) * float64(y))
			}
			got := dotAVX2(&a[offA], &b[offB], n)
			goRes := dotGo(a[offA:offA+n], b[offB:offB+n])
			tol := 1e-6*mag + 1e-7
			require.False(t, math.IsNaN(float64(got)), "n=%d: read outside the slice", n)
			require.InDelta(t, want, float64(got), tol, "asm n=%d", n)
			require.InDelta(t, float64(goRes), float64(got), 2*tol, "asm vs Go n=%d", n)
			if n > 0 {
				require.Equal(t, got, dot(a[offA:offA+n], b[offB:]), "dot dispatches to the kernel")
			}
		}
	}
	// Exact small cases, including the scalar tail only and one 32-block.
	ones := make([]float32, 40)
	for i := range ones {
		ones[i] = 1
	}
	for _, n := range []int{1, 3, 7, 8, 15, 32, 33, 40} {
		assert.Equal(t, float32(n), dotAVX2(&ones[0], &ones[0], n), "n=%d", n)
	}
}

// TestDotFallback forces the pure-Go path on this CPU: dot must then equal
// dotGo bit for bit.
func TestDotFallback(t *testing.T) {
	saved := useAVX2
	useAVX2 = false
	defer func() { useAVX2 = saved }()
	rng := newRand(3)
	for _, n := range []int{1, 5, 8, 13, 384} {
		a, b := make([]float32, n), make([]float32, n)
		for i := range a {
			a[i], b[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
		}
		assert.Equal(t, dotGo(a, b), dot(a, b), "n=%d", n)
	}
}
