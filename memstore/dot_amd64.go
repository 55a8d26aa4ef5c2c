package memstore

import "golang.org/x/sys/cpu"

// useAVX2 selects the assembly kernel on CPUs with AVX2 and FMA.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func dotAVX2(a, b *float32, n int) float32

// dot is the inner product of a and b (len(b) >= len(a)).
func dot(a, b []float32) float32 {
	if len(a) == 0 {
		return 0
	}
	if useAVX2 {
		_ = b[len(a)-1] // bounds check before handing pointers to assembly
		return dotAVX2(&a[0], &b[0], len(a))
	}
	return dotGo(a, b)
}
