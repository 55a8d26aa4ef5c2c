package llama

import (
	"errors"
	"math"
	"path/filepath"
	"sync"
	"testing"

	"github.com/empo2/empo2/gguf"
	"github.com/empo2/empo2/lora"
)

func initAdapter(t testing.TB, seed uint64, targets []string) *lora.Adapter {
	t.Helper()
	f, err := gguf.Open(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, err := lora.Init(f, lora.InitConfig{Rank: 4, Alpha: 8, Targets: targets, Seed: seed, RandomB: true})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func logitsWith(t testing.TB, m *Model, ad *Adapter, prompt []int32) []float32 {
	t.Helper()
	c := newCtx(t, m, ContextParams{NCtx: 256})
	if ad != nil {
		if err := c.SetAdapter(ad, 1); err != nil {
			t.Fatal(err)
		}
	}
	l, err := c.Logits(prompt)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestAdapterFromMemory: an adapter made from a lora.Adapter in memory gives
// the same logits, bit for bit, as the same adapter written to a file and
// loaded by llama.cpp; SetTensors makes it equal to another file's adapter.
func TestAdapterFromMemory(t *testing.T) {
	m := loadTiny(t)
	prompt := testPrompt(t, m)
	x, y := initAdapter(t, 1, nil), initAdapter(t, 2, nil)
	dir := t.TempDir()
	load := func(a *lora.Adapter, name string) *Adapter {
		p := filepath.Join(dir, name)
		if err := a.Write(p, gguf.TypeF32); err != nil {
			t.Fatal(err)
		}
		ad, err := m.LoadAdapter(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ad.Close() })
		return ad
	}
	fileX, fileY := load(x, "x.gguf"), load(y, "y.gguf")
	mem, err := m.NewAdapter(x)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	if len(mem.Tensors()) != len(fileX.Tensors()) || mem.Alpha() != fileX.Alpha() {
		t.Fatalf("tensors %d vs %d, alpha %v vs %v", len(mem.Tensors()), len(fileX.Tensors()), mem.Alpha(), fileX.Alpha())
	}
	base := logitsWith(t, m, nil, prompt)
	lx, ly := logitsWith(t, m, fileX, prompt), logitsWith(t, m, fileY, prompt)
	if sameBits(base, lx) || sameBits(lx, ly) {
		t.Fatal("the adapters do not change the logits: the test would prove nothing")
	}
	if got := logitsWith(t, m, mem, prompt); !sameBits(got, lx) {
		t.Fatal("adapter from memory != the same adapter from a file")
	}
	if err := mem.SetTensors(y); err != nil {
		t.Fatal(err)
	}
	if got := logitsWith(t, m, mem, prompt); !sameBits(got, ly) {
		t.Fatal("after SetTensors(y): != adapter y from a file")
	}
	for i, p := range y.Pairs[:2] {
		got, err := mem.Tensor(p.NameB())
		if err != nil || !sameBits(got, p.B) {
			t.Fatalf("pair %d: Tensor after SetTensors: %v", i, err)
		}
	}
	// refusals: nothing is written
	few := initAdapter(t, 3, []string{"q"})
	if err := mem.SetTensors(few); !errors.Is(err, ErrBadAdapter) {
		t.Errorf("subset of tensors: %v", err)
	}
	other := y.Clone()
	other.Pairs[0].Rank, other.Pairs[0].A = 2, other.Pairs[0].A[:2*other.Pairs[0].In]
	if err := mem.SetTensors(other); !errors.Is(err, ErrBadAdapter) {
		t.Errorf("wrong rank: %v", err)
	}
	if got := logitsWith(t, m, mem, prompt); !sameBits(got, ly) {
		t.Fatal("a refused SetTensors changed the adapter")
	}
	bad := x.Clone()
	bad.Arch = "llama"
	if _, err := m.NewAdapter(bad); !errors.Is(err, ErrBadAdapter) {
		t.Errorf("other architecture: %v", err)
	}
	bad = x.Clone()
	bad.Pairs[0].Base = "blk.9.attn_q.weight"
	if _, err := m.NewAdapter(bad); !errors.Is(err, ErrBadAdapter) {
		t.Errorf("missing base tensor: %v", err)
	}
	bad = x.Clone()
	bad.Pairs[0].A[0] = float32(math.NaN())
	if _, err := m.NewAdapter(bad); !errors.Is(err, ErrBadAdapter) {
		t.Errorf("NaN: %v", err)
	}
}

// TestConcurrentSetTensors: while one goroutine swaps the whole adapter
// between x and y with SetTensors, every decode of another goroutine sees
// exactly x or exactly y (a per-tensor update would expose mixtures).
func TestConcurrentSetTensors(t *testing.T) {
	m := loadTiny(t)
	prompt := testPrompt(t, m)
	x, y := initAdapter(t, 1, nil), initAdapter(t, 2, nil)
	mem, err := m.NewAdapter(x)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	lx := logitsWith(t, m, mem, prompt)
	if err := mem.SetTensors(y); err != nil {
		t.Fatal(err)
	}
	ly := logitsWith(t, m, mem, prompt)
	c := newCtx(t, m, ContextParams{NCtx: 256})
	if err := c.SetAdapter(mem, 1); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			src := x
			if i%2 == 1 {
				src = y
			}
			if err := mem.SetTensors(src); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	seen := map[string]int{}
	for it := 0; it < 40; it++ {
		l, err := c.Logits(prompt)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case sameBits(l, lx):
			seen["x"]++
		case sameBits(l, ly):
			seen["y"]++
		default:
			close(stop)
			wg.Wait()
			t.Fatalf("decode %d saw a mixture of two adapters", it)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("decodes: %v", seen)
}
