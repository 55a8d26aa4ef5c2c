//go:build !amd64

package memstore

// dot is the inner product of a and b (len(b) >= len(a)).
func dot(a, b []float32) float32 { return dotGo(a, b) }
