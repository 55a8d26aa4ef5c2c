package textlab

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/empo2/empo2/environments"
)

// BenchmarkStep measures Env.Step throughput (parse, act, tick, score,
// observation) over gold paths and random valid actions of every task.
// It does a fixed amount of work per b.N so that -benchtime 1x is meaningful,
// and reports steps/s (target: at least 10k).
func BenchmarkStep(b *testing.B) {
	e, err := New(environments.Options{})
	if err != nil {
		b.Fatal(err)
	}
	type script struct {
		task string
		v    int
		acts []string
	}
	var scripts []script
	rng := rand.New(rand.NewPCG(3, 4))
	for _, t := range allTasks {
		for v := 0; v < t.variations; v += 5 {
			g, err := e.GoldActions(ctx, t.name, v)
			if err != nil {
				b.Fatal(err)
			}
			scripts = append(scripts, script{t.name, v, g})
			// and a random walk over valid actions (avoiding focus)
			if _, err := e.Reset(ctx, t.name, v, 0); err != nil {
				b.Fatal(err)
			}
			var walk []string
			for range 30 {
				va, _ := e.ValidActions(ctx)
				a := va[rng.IntN(len(va))]
				for len(a) > 6 && a[:6] == "focus " {
					a = va[rng.IntN(len(va))]
				}
				walk = append(walk, a)
				if r, _ := e.Step(ctx, a); r.Done {
					break
				}
			}
			scripts = append(scripts, script{t.name, v, walk})
		}
	}
	const perIter = 50_000
	b.ResetTimer()
	var steps int
	var spent time.Duration
	for range b.N {
		start := time.Now()
		n := 0
		for n < perIter {
			for _, s := range scripts {
				if _, err := e.Reset(ctx, s.task, s.v, 0); err != nil {
					b.Fatal(err)
				}
				for _, a := range s.acts {
					r, err := e.Step(ctx, a)
					if err != nil {
						b.Fatal(err)
					}
					n++
					if r.Done {
						break
					}
				}
			}
		}
		spent += time.Since(start)
		steps += n
	}
	b.ReportMetric(float64(steps)/spent.Seconds(), "steps/s")
	b.ReportMetric(float64(spent.Nanoseconds())/float64(steps), "ns/step")
}

// BenchmarkValidActions measures listing the valid actions (done by agents
// that choose from a list, and by action correction).
func BenchmarkValidActions(b *testing.B) {
	e, err := New(environments.Options{})
	if err != nil {
		b.Fatal(err)
	}
	gold, err := e.GoldActions(ctx, "light-bulb", 0)
	if err != nil {
		b.Fatal(err)
	}
	const perIter = 2000
	var calls int
	var spent time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		for n := 0; n < perIter; {
			if _, err := e.Reset(ctx, "light-bulb", 0, 0); err != nil {
				b.Fatal(err)
			}
			for _, a := range gold[:len(gold)-1] {
				if _, err := e.ValidActions(ctx); err != nil {
					b.Fatal(err)
				}
				calls++
				n++
				if _, err := e.Step(ctx, a); err != nil {
					b.Fatal(err)
				}
			}
		}
		spent += time.Since(start)
	}
	b.ReportMetric(float64(calls)/spent.Seconds(), "calls/s")
}
