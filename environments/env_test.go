package environments

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"
	"github.com/stretchr/testify/require"
)

// counterEnv is a trivial Env that records concurrent use: two goroutines
// inside one instance at once is a pool bug.
type counterEnv struct {
	inUse  atomic.Int32
	steps  int // deliberately unsynchronized: -race catches shared use
	closed atomic.Bool
	bad    *atomic.Int32
}

func (c *counterEnv) Reset(context.Context, string, int, int64) (ResetResult, error) {
	return ResetResult{}, nil
}
func (c *counterEnv) Step(context.Context, string) (StepResult, error) {
	if c.inUse.Add(1) != 1 {
		c.bad.Add(1)
	}
	c.steps++
	time.Sleep(50 * time.Microsecond)
	c.inUse.Add(-1)
	return StepResult{}, nil
}
func (c *counterEnv) ValidActions(context.Context) ([]string, error) { return nil, ErrNotSupported }
func (c *counterEnv) Score() float64                                 { return 0 }
func (c *counterEnv) Close() error                                   { c.closed.Store(true); return nil }

func TestConcurrentPool(t *testing.T) {
	var bad atomic.Int32
	var made []*counterEnv
	var mu sync.Mutex
	p, err := NewPoolFunc(func() (Env, error) {
		e := &counterEnv{bad: &bad}
		mu.Lock()
		made = append(made, e)
		mu.Unlock()
		return e, nil
	}, 4)
	require.NoError(t, err)
	require.Equal(t, 4, p.Size())

	const jobs = 64
	err = p.Map(context.Background(), jobs, func(ctx context.Context, i int, e Env) error {
		for range 5 {
			if _, err := e.Step(ctx, "wait"); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Zero(t, bad.Load(), "an instance was used by two goroutines at once")
	total := 0
	for _, e := range made {
		total += e.steps
	}
	require.Equal(t, jobs*5, total)

	// A job error is reported.
	boom := errors.New("boom")
	err = p.Map(context.Background(), 3, func(ctx context.Context, i int, e Env) error {
		if i == 1 {
			return boom
		}
		return nil
	})
	require.ErrorIs(t, err, boom)

	// Acquire blocks when all are out, and honours ctx.
	var out []Env
	for range 4 {
		e, err := p.Acquire(context.Background())
		require.NoError(t, err)
		out = append(out, e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	_, err = p.Acquire(ctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// A waiting Acquire gets ErrClosed when the pool closes.
	got := make(chan error, 1)
	go func() { _, err := p.Acquire(context.Background()); got <- err }()
	time.Sleep(10 * time.Millisecond)
	require.NoError(t, p.Close())
	select {
	case err := <-got:
		require.ErrorIs(t, err, ErrClosed)
	case <-time.After(2 * time.Second):
		t.Fatal("Acquire did not return after Close")
	}
	// Instances still out are closed on release; a foreign one is refused.
	for _, e := range out {
		require.NoError(t, p.Release(e))
	}
	for _, e := range made {
		require.True(t, e.closed.Load(), "instance left open after Close")
	}
	require.Error(t, p.Release(&counterEnv{bad: &bad}))
	require.NoError(t, p.Close(), "Close is idempotent")
}

func TestNewPoolFailure(t *testing.T) {
	var n atomic.Int32
	var closed atomic.Int32
	_, err := NewPoolFunc(func() (Env, error) {
		if n.Add(1) == 2 {
			return nil, ErrSimulatorDied
		}
		return &closeCounter{&closed}, nil
	}, 3)
	require.ErrorIs(t, err, ErrSimulatorDied)
	require.Equal(t, int32(2), closed.Load(), "started instances must be closed on failure")
	_, err = NewPoolFunc(nil, 0)
	require.Error(t, err)
	_, err = NewPool("no-such-env", Options{}, 1)
	require.ErrorIs(t, err, ErrUnknownEnv)
}

type closeCounter struct{ n *atomic.Int32 }

func (c *closeCounter) Reset(context.Context, string, int, int64) (ResetResult, error) {
	return ResetResult{}, nil
}
func (c *closeCounter) Step(context.Context, string) (StepResult, error) { return StepResult{}, nil }
func (c *closeCounter) ValidActions(context.Context) ([]string, error)   { return nil, nil }
func (c *closeCounter) Score() float64                                   { return 0 }
func (c *closeCounter) Close() error                                     { c.n.Add(1); return nil }

func TestSplitVariations(t *testing.T) {
	// ScienceWorld's rule: boil has 30 variations -> 0-13 train, 14-20 dev, 21-29 test.
	tr, dv, te := SplitVariations(30)
	require.Equal(t, 14, len(tr))
	require.Equal(t, []int{14, 15, 16, 17, 18, 19, 20}, dv)
	require.Equal(t, 21, te[0])
	require.Equal(t, 29, te[len(te)-1])
	for _, n := range []int{5, 10, 14, 20, 30, 126, 436, 1386} {
		tr, dv, te := SplitVariations(n)
		seen := map[int]bool{}
		for _, s := range [][]int{tr, dv, te} {
			for _, v := range s {
				require.False(t, seen[v], "n=%d: %d in two splits", n, v)
				require.True(t, v >= 0 && v < n)
				seen[v] = true
			}
		}
		require.Len(t, seen, n, "n=%d: every variation lands in a split", n)
		require.InDelta(t, 0.5, float64(len(tr))/float64(n), 0.1)
	}
	tr, dv, te = SplitVariations(4)
	require.Equal(t, []int{0, 1}, tr)
	require.Equal(t, []int{2}, dv)
	require.Equal(t, []int{3}, te)
	tr, _, _ = SplitVariations(0)
	require.Empty(t, tr)
}

func TestTaskHelpers(t *testing.T) {
	tasks := []Task{WithSplits(Task{Name: "a", Variations: 8, StepLimit: 30}), {Name: "b", Variations: 2}}
	tk, err := FindTask(tasks, "a")
	require.NoError(t, err)
	require.Equal(t, []int{0, 1, 2, 3}, tk.Train)
	_, err = FindTask(tasks, "")
	require.ErrorIs(t, err, ErrUnknownTask)
	_, err = FindTask(tasks, "zzz")
	require.ErrorIs(t, err, ErrUnknownTask)
	byID, err := FindTask([]Task{{Name: "boil", Description: "1-1: boil a substance"}, {Name: "power-component", Description: "3-1: power a component"}}, "3-1")
	require.NoError(t, err)
	require.Equal(t, "power-component", byID.Name, "a short id before the description's colon names a task")
	_, err = FindTask([]Task{{Name: "boil", Description: "1-1: boil a substance"}}, "1")
	require.ErrorIs(t, err, ErrUnknownTask, "not a prefix of the id")
	only, err := FindTask(tasks[:1], "")
	require.NoError(t, err)
	require.Equal(t, "a", only.Name)
	require.ErrorIs(t, CheckVariation(tk, 8), ErrBadVariation)
	require.ErrorIs(t, CheckVariation(tk, -1), ErrBadVariation)
	require.NoError(t, CheckVariation(tk, 7))
	require.Equal(t, 30, StepLimit(tk, Options{}))
	require.Equal(t, 5, StepLimit(tk, Options{StepLimit: 5}))
	require.Equal(t, DefaultStepLimit, StepLimit(tasks[1], Options{}))
	v, err := tk.VariationsIn(Dev)
	require.NoError(t, err)
	require.Equal(t, []int{4, 5}, v)
	_, err = ParseSplit("validation")
	require.Error(t, err)
	s, err := ParseSplit(" Test ")
	require.NoError(t, err)
	require.Equal(t, Test, s)
}

func TestCorrectAction(t *testing.T) {
	valid := []string{"open door to kitchen", "go to kitchen", "look around", "pick up red wire"}
	out, changed := CorrectAction("Look  Around", valid)
	require.False(t, changed)
	require.Equal(t, "Look  Around", out)
	out, changed = CorrectAction("walk to the kitchen", valid)
	require.True(t, changed)
	require.Equal(t, "go to kitchen", out)
	out, _ = CorrectAction("take red wire", valid)
	require.Equal(t, "pick up red wire", out)
	out, changed = CorrectAction("anything", nil)
	require.False(t, changed)
	require.Equal(t, "anything", out)
	require.InDelta(t, 2.0/3, Jaccard("a b", "b c a"), 1e-12)
	require.InDelta(t, 1.0/6, Jaccard("open door to kitchen", "go to hallway"), 1e-12)
	require.Equal(t, 0.0, Jaccard("", ""))
	require.Equal(t, 1.0, Jaccard("Go to kitchen", "go TO kitchen"))
}

// panicEnv is a nil-able Env whose Close dereferences its receiver, like a
// real simulator wrapper would.
type panicEnv struct{ closed bool }

func (p *panicEnv) Reset(context.Context, string, int, int64) (ResetResult, error) {
	return ResetResult{}, nil
}
func (p *panicEnv) Step(context.Context, string) (StepResult, error) { return StepResult{}, nil }
func (p *panicEnv) ValidActions(context.Context) ([]string, error)   { return nil, ErrNotSupported }
func (p *panicEnv) Score() float64                                   { return 0 }
func (p *panicEnv) Close() error                                     { p.closed = true; return nil }

// TestPoolStartFailureTypedNil: a constructor that fails with a typed nil
// inside the Env interface must not make the pool's cleanup panic, and the
// instances that did start are closed.
func TestPoolStartFailureTypedNil(t *testing.T) {
	var started []*panicEnv
	var mu sync.Mutex
	var n atomic.Int32
	_, err := NewPoolFunc(func() (Env, error) {
		if n.Add(1) == 2 {
			var e *panicEnv
			return e, errors.New("no jar")
		}
		e := &panicEnv{}
		mu.Lock()
		started = append(started, e)
		mu.Unlock()
		return e, nil
	}, 3)
	require.ErrorContains(t, err, "no jar")
	require.Len(t, started, 2)
	for _, e := range started {
		require.True(t, e.closed)
	}
}

// TestPoolReplace: a failed instance is closed and a new one takes its
// place (free for the next Acquire); after Close it is only closed; an
// instance the pool did not hand out is refused; a replacement that cannot
// start leaves the pool one instance short.
func TestPoolReplace(t *testing.T) {
	var made, closed atomic.Int32
	fail := atomic.Bool{}
	p, err := NewPoolFunc(func() (Env, error) {
		if fail.Load() {
			return nil, errors.New("no more")
		}
		made.Add(1)
		return &closeCounter{n: &closed}, nil
	}, 2)
	require.NoError(t, err)
	ctx := context.Background()
	a, err := p.Acquire(ctx)
	require.NoError(t, err)
	require.NoError(t, p.Replace(a))
	require.Equal(t, int32(3), made.Load())
	require.Equal(t, int32(1), closed.Load())
	require.Error(t, p.Replace(a), "a is no longer the pool's")
	require.Error(t, p.Release(a))
	// both free instances can be acquired, and neither is the closed one
	x, err := p.Acquire(ctx)
	require.NoError(t, err)
	y, err := p.Acquire(ctx)
	require.NoError(t, err)
	require.NotSame(t, a, x)
	require.NotSame(t, a, y)
	require.Equal(t, 2, p.Size())
	fail.Store(true)
	require.ErrorContains(t, p.Replace(x), "no more")
	require.Equal(t, 1, p.Size())
	require.NoError(t, p.Close())
	require.NoError(t, p.Replace(y)) // closed pool: y is closed, nothing is made
	require.Equal(t, int32(3), made.Load())
	require.Equal(t, int32(3), closed.Load(), "a, x and y")
}

// TestPoolMemoryLine: NewPool logs the pool's memory (instances × the
// per-instance bound against the machine's memory) when the environment
// bounds it, as a warning past half the machine.
func TestPoolMemoryLine(t *testing.T) {
	var buf bytes.Buffer
	old := log.Logger
	log.Logger = zerolog.New(&buf)
	defer func() { log.Logger = old }()
	Register(Spec{Name: "mem-test", New: func(Options) (Env, error) { return &counterEnv{}, nil },
		InstanceMemory: func(o Options) (int64, string) {
			if o.DataDir == "big" {
				return 1 << 50, "a huge cap"
			}
			return 300 << 20, "a test cap"
		}})
	p, err := NewPool("mem-test", Options{}, 3)
	require.NoError(t, err)
	require.NoError(t, p.Close())
	line := buf.String()
	require.Contains(t, line, `"level":"info"`)
	require.Contains(t, line, "environment pool: 3 instances × 300 MiB (a test cap) ≈ 900 MiB")
	if MachineMemory() > 0 {
		require.Contains(t, line, "of the machine's")
	}
	buf.Reset()
	p, err = NewPool("mem-test", Options{DataDir: "big"}, 2)
	require.NoError(t, err)
	require.NoError(t, p.Close())
	if MachineMemory() > 0 {
		require.Contains(t, buf.String(), `"level":"warn"`)
		require.Contains(t, buf.String(), "more than half of it")
	}
	buf.Reset()
	Register(Spec{Name: "mem-none", New: func(Options) (Env, error) { return &counterEnv{}, nil }})
	p, err = NewPool("mem-none", Options{}, 1) // no bound: no line
	require.NoError(t, err)
	require.NoError(t, p.Close())
	require.NotContains(t, buf.String(), "environment pool")
	require.Equal(t, "512 MiB", FormatBytes(512<<20))
	require.Equal(t, "23.4 GiB", FormatBytes(25125558681))
}

// TestNewPoolRefusesRepeatedInstance: a constructor that returns one
// instance twice (trainer's newEnvPool once did, racing on its first
// instance) is refused, and the instances are closed once each; two
// episodes played on one instance end in ErrEpisodeDone or a refused
// Release mid-run.
func TestNewPoolRefusesRepeatedInstance(t *testing.T) {
	var closed atomic.Int32
	shared := &closeCounter{&closed}
	var n atomic.Int32
	_, err := NewPoolFunc(func() (Env, error) {
		if n.Add(1) <= 2 {
			return shared, nil
		}
		return &closeCounter{&closed}, nil
	}, 4)
	require.ErrorContains(t, err, "twice")
	require.Equal(t, int32(3), closed.Load(), "three distinct instances started, each closed once")
}
