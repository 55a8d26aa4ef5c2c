package environments

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/rs/zerolog/log"

	"github.com/empo2/empo2/internal/sysmem"
)

// Pool holds N instances of one environment for parallel rollouts: a
// goroutine Acquires an instance, plays on it alone, and Releases it. Pool is
// safe for concurrent use; the instances themselves are not, which is why
// the pool hands each to one goroutine at a time.
type Pool struct {
	all    []Env
	free   chan Env
	done   chan struct{}
	newEnv func() (Env, error)

	mu     sync.Mutex
	closed bool
	out    map[Env]bool // instances handed out and not yet released
}

// NewPool starts n instances of the registered environment name with opts
// (in parallel: a ScienceWorld JVM takes seconds to start). When the
// environment bounds an instance's memory (Spec.InstanceMemory), it first
// logs the pool's total against the machine's memory (PoolMemory), as a
// warning when it would take more than half of it.
func NewPool(name string, opts Options, n int) (*Pool, error) {
	spec, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	if pm := PoolMemory(spec, opts, n); pm.PerInstance > 0 {
		ev := log.Info()
		if pm.TooLarge() {
			ev = log.Warn()
		}
		ev.Str("env", name).Msg(pm.String())
	}
	return NewPoolFunc(func() (Env, error) { return spec.New(opts) }, n)
}

// PoolMem is the memory a pool of instances may take.
type PoolMem struct {
	Instances   int
	PerInstance int64  // bytes one instance may take (0 = unknown)
	What        string // what bounds it (Spec.InstanceMemory)
	Machine     int64  // the machine's memory in bytes (0 = unknown)
}

// PoolMemory is the memory n instances of spec with opts may take.
func PoolMemory(spec Spec, opts Options, n int) PoolMem {
	pm := PoolMem{Instances: n, Machine: MachineMemory()}
	if spec.InstanceMemory != nil {
		pm.PerInstance, pm.What = spec.InstanceMemory(opts)
	}
	return pm
}

// Total is Instances × PerInstance.
func (m PoolMem) Total() int64 { return int64(m.Instances) * m.PerInstance }

// TooLarge reports whether the pool may take more than half of the
// machine's memory (the policy, its KV cache and the training graph need
// the rest).
func (m PoolMem) TooLarge() bool { return m.Machine > 0 && 2*m.Total() > m.Machine }

// String is the one log line: "environment pool: 8 instances × 512 MiB
// (JVM heap cap -Xmx512m) ≈ 4.0 GiB of the machine's 23.4 GiB".
func (m PoolMem) String() string {
	s := fmt.Sprintf("environment pool: %d instances × %s (%s) ≈ %s", m.Instances, FormatBytes(m.PerInstance), m.What, FormatBytes(m.Total()))
	if m.Machine > 0 {
		s += " of the machine's " + FormatBytes(m.Machine)
	}
	if m.TooLarge() {
		s += ": more than half of it; lower the per-instance cap or the number of parallel episodes"
	}
	return s
}

// FormatBytes writes n bytes in MiB below 1 GiB, else in GiB.
func FormatBytes(n int64) string {
	if n < 1<<30 {
		return fmt.Sprintf("%d MiB", (n+1<<19)>>20)
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

// MachineMemory is the memory this process may use in bytes: the
// machine's (MemTotal) or a smaller memory cgroup limit (v1 or v2;
// sysmem.Memory.Limit); 0 when it cannot be read (not Linux).
func MachineMemory() int64 {
	m, err := sysmem.Available()
	if err != nil {
		return 0
	}
	return m.Limit
}

// NewPoolFunc builds a pool of n instances made by newEnv, which it calls
// from n goroutines at once (newEnv must be safe for that). If any instance
// fails to start, the others are closed and the first error is returned;
// so, too, when newEnv returns one instance twice (two episodes would play
// on it at once).
func NewPoolFunc(newEnv func() (Env, error), n int) (*Pool, error) {
	if n < 1 {
		return nil, fmt.Errorf("environments: pool size %d: want at least 1", n)
	}
	envs := make([]Env, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			envs[i], errs[i] = newEnv()
		}()
	}
	wg.Wait()
	seen := make(map[Env]bool, n)
	for i, e := range envs {
		if errs[i] == nil && e != nil && seen[e] {
			errs[i] = fmt.Errorf("environments: the instance constructor returned instance %d twice", i)
			continue
		}
		seen[e] = true
	}
	if err := errors.Join(errs...); err != nil {
		for i, e := range envs {
			if errs[i] == nil && e != nil { // only instances that started (a repeat has its error)
				_ = e.Close()
			}
		}
		return nil, fmt.Errorf("environments: starting pool: %w", err)
	}
	p := &Pool{all: envs, free: make(chan Env, n), done: make(chan struct{}), newEnv: newEnv, out: map[Env]bool{}}
	for _, e := range envs {
		p.free <- e
	}
	return p, nil
}

// Size is the number of instances.
func (p *Pool) Size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.all)
}

// Acquire hands out a free instance, waiting until one is released, ctx is
// done or the pool is closed (ErrClosed).
func (p *Pool) Acquire(ctx context.Context) (Env, error) {
	select {
	case <-p.done:
		return nil, ErrClosed
	default:
	}
	select {
	case e := <-p.free:
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.closed { // lost a race with Close: give it back to be closed
			_ = e.Close()
			return nil, ErrClosed
		}
		p.out[e] = true
		return e, nil
	case <-p.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Release returns an instance obtained from Acquire. Releasing after Close
// closes the instance; releasing an instance that is not out is an error.
func (p *Pool) Release(e Env) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.out[e] {
		return errors.New("environments: Release of an instance that this pool did not hand out")
	}
	delete(p.out, e)
	if p.closed {
		return e.Close()
	}
	p.free <- e // never blocks: capacity is the pool size
	return nil
}

// Replace closes an instance obtained from Acquire that is of no further
// use (its simulator died) and puts a new one in its place, free for the
// next Acquire. If the new one cannot start, the pool is one instance
// short and the start error is returned; after Close it only closes e.
func (p *Pool) Replace(e Env) error {
	p.mu.Lock()
	if !p.out[e] {
		p.mu.Unlock()
		return errors.New("environments: Replace of an instance that this pool did not hand out")
	}
	delete(p.out, e)
	closed := p.closed
	p.mu.Unlock()
	_ = e.Close() // a dead instance's close error says nothing new
	if closed {
		return nil
	}
	ne, err := p.newEnv()
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.Index(p.all, e)
	if err != nil {
		p.all = slices.Delete(p.all, i, i+1)
		return fmt.Errorf("environments: replacing a failed instance: %w", err)
	}
	p.all[i] = ne
	if p.closed {
		return ne.Close()
	}
	p.free <- ne
	return nil
}

// With runs fn on an acquired instance and releases it afterwards.
func (p *Pool) With(ctx context.Context, fn func(Env) error) error {
	e, err := p.Acquire(ctx)
	if err != nil {
		return err
	}
	ferr := fn(e)
	return errors.Join(ferr, p.Release(e))
}

// Map runs jobs 0..n-1 concurrently, at most Size() at a time, each on its
// own instance, and returns the errors joined (nil when all succeeded).
func (p *Pool) Map(ctx context.Context, n int, job func(ctx context.Context, i int, e Env) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.With(ctx, func(e Env) error { return job(ctx, i, e) })
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Close closes the free instances now and the ones still out when they are
// released; waiting Acquires return ErrClosed. It is idempotent.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	close(p.done)
	var errs []error
	for {
		select {
		case e := <-p.free:
			errs = append(errs, e.Close())
		default:
			return errors.Join(errs...)
		}
	}
}
