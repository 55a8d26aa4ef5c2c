// Package stats holds the small statistics the trainer, the optimizer and
// evaluation share, so that each is computed one way.
package stats

// Mean is a running weighted mean Σ wᵢxᵢ / Σ wᵢ; with weight 1 per value
// it is the plain mean. The sum is accumulated in the order of Add, so a
// mean computed once is bit-for-bit the same every time.
type Mean struct {
	sum, weight float64
}

// Add adds x with weight w.
func (m *Mean) Add(x, w float64) {
	m.sum += w * x
	m.weight += w
}

// Value is the mean, 0 when the total weight is 0.
func (m Mean) Value() float64 {
	if m.weight == 0 {
		return 0
	}
	return m.sum / m.weight
}

// Weight is the total weight (the count, with weight 1 per value).
func (m Mean) Weight() float64 { return m.weight }
