package scienceworld

import (
	"net"
	"testing"
	"time"

	"github.com/empo2/empo2/environments"
)

// benchSteps plays gold paths of power-component variation 0 for about
// `episodes` episodes and reports steps/s, counting only Step (the step,
// getScore, getCompleted and getNumMoves round trips), not Reset.
func benchSteps(b *testing.B, e *Env, gold []string, episodes int) {
	b.Helper()
	var steps int
	var spent time.Duration
	b.ResetTimer()
	for range b.N {
		for range episodes {
			if _, err := e.Reset(bg, "power-component", 0, 0); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			for _, a := range gold {
				r, err := e.Step(bg, a)
				if err != nil {
					b.Fatal(err)
				}
				steps++
				if r.Done {
					break
				}
			}
			spent += time.Since(start)
		}
	}
	b.ReportMetric(float64(steps)/spent.Seconds(), "steps/s")
	b.ReportMetric(float64(spent.Microseconds())/float64(steps), "µs/step")
}

// BenchmarkStepFakeGateway measures the Go side of the bridge (encoding,
// TCP round trips, decoding) against the in-process fake gateway.
func BenchmarkStepFakeGateway(b *testing.B) {
	g, err := newFakeGateway()
	if err != nil {
		b.Fatal(err)
	}
	defer g.close()
	conn, err := net.Dial("tcp", g.addr())
	if err != nil {
		b.Fatal(err)
	}
	e, err := newWithConn(bg, environments.Options{}, conn, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	gold := append(append([]string{}, "look around", "inventory"), fakeGold...)
	benchSteps(b, e, gold, 500)
}

// BenchmarkStepRealJar measures a ScienceWorld step through the bridge on
// the real simulator (skipped unless SCIENCEWORLD_JAR is set).
func BenchmarkStepRealJar(b *testing.B) {
	e := realEnv(b, environments.Options{StepLimit: 1000})
	gold, err := e.GoldActions(bg, "power-component", 0)
	if err != nil {
		b.Fatal(err)
	}
	benchSteps(b, e, gold, 5)
}
