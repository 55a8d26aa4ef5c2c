package environments

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Pool holds N instances of one environment for parallel rollouts: a
// goroutine Acquires an instance, plays on it alone, and Releases it. Pool is
// safe for concurrent use; the instances themselves are not, which is why
// the pool hands each to one goroutine at a time.
type Pool struct {
	all  []Env
	free chan Env
	done chan struct{}

	mu     sync.Mutex
	closed bool
	out    map[Env]bool // instances handed out and not yet released
}

// NewPool starts n instances of the registered environment name with opts
// (in parallel: a ScienceWorld JVM takes seconds to start).
func NewPool(name string, opts Options, n int) (*Pool, error) {
	spec, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	return NewPoolFunc(func() (Env, error) { return spec.New(opts) }, n)
}

// NewPoolFunc builds a pool of n instances made by newEnv. If any instance
// fails to start, the others are closed and the first error is returned.
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
	if err := errors.Join(errs...); err != nil {
		for i, e := range envs {
			if errs[i] == nil && e != nil { // only instances that started
				_ = e.Close()
			}
		}
		return nil, fmt.Errorf("environments: starting pool: %w", err)
	}
	p := &Pool{all: envs, free: make(chan Env, n), done: make(chan struct{}), out: map[Env]bool{}}
	for _, e := range envs {
		p.free <- e
	}
	return p, nil
}

// Size is the number of instances.
func (p *Pool) Size() int { return len(p.all) }

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
