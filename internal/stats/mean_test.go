package stats

import "testing"

func TestMean(t *testing.T) {
	var m Mean
	if m.Value() != 0 || m.Weight() != 0 {
		t.Fatal("empty mean")
	}
	m.Add(1, 3) // (1·3 + 5·1) / 4 = 2
	m.Add(5, 1)
	if m.Value() != 2 || m.Weight() != 4 {
		t.Fatalf("weighted mean %v weight %v", m.Value(), m.Weight())
	}
	var u Mean
	xs := []float64{0.1, 0.2, 0.3}
	for _, x := range xs {
		u.Add(x, 1)
	}
	if want := (xs[0] + xs[1] + xs[2]) / 3; u.Value() != want {
		t.Fatalf("plain mean %v, want %v (the same summation order)", u.Value(), want)
	}
	var z Mean
	z.Add(7, 0)
	if z.Value() != 0 {
		t.Fatalf("zero weight: %v", z.Value())
	}
}
