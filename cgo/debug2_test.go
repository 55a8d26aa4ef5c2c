package cgo

import (
	"testing"
)

func TestDebugCoef(t *testing.T) {
	m := loadTiny(t, tinyCfg(), LoRAConfig{Rank: 2, Alpha: 4, Seed: 9, RandomB: true}, Options{Threads: 2})
	toks := []int32{5, 6, 7, 8, 9, 10}
	mm := m.m
	sumlp := func() float64 {
		p, _ := mm.pack([][]int32{toks}, func(int) []int { return []int{3, 4, 5} })
		lp, _, _ := mm.forward(p, false)
		return float64(lp[0] + lp[1] + lp[2])
	}
	m.ZeroGrads()
	p, _ := mm.pack([][]int32{toks}, func(int) []int { return []int{3, 4, 5} })
	mm.forward(p, true)
	debugBackward(mm, []float32{1, 1, 1}, []float32{0, 0, 0})
	g := m.Grads()
	par := m.ReadParams()
	for _, pi := range []int{0, 1, 2, 3, 6, 7, 12, 13, 27} {
		for _, i := range []int{0, 1} {
			o := par[pi][i]
			par[pi][i] = o + 1e-2
			m.WriteParams(par)
			a := sumlp()
			par[pi][i] = o - 1e-2
			m.WriteParams(par)
			b := sumlp()
			par[pi][i] = o
			m.WriteParams(par)
			t.Logf("%s[%d] g=%v fd=%v", m.Params()[pi].Name, i, g[pi][i], (a-b)/2e-2)
		}
	}
}
