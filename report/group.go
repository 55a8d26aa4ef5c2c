package report

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
)

// Group is a set of runs with the same config once seeds are removed (or a
// single run without config.yaml). Curves of a group are drawn as the mean
// over its runs with a min–max band.
type Group struct {
	Label string
	Runs  []*Run
	// Differs lists "key=value" settings of this group's config that differ
	// from at least one other group (flattened keys, seeds excluded).
	Differs []string
}

// Seeds lists the runs' seeds ("?" where unknown).
func (g *Group) Seeds() string {
	var s []string
	for _, r := range g.Runs {
		if r.Seed != nil {
			s = append(s, fmt.Sprint(*r.Seed))
		} else {
			s = append(s, "?")
		}
	}
	return strings.Join(s, ", ")
}

// seedSuffix matches a trailing seed marker of a run directory name:
// "empo2-s1", "grpo_seed2", "run.3".
var seedSuffix = regexp.MustCompile(`[-_.]?(s|seed)?\d+$`)

// GroupRuns groups runs by config (seed removed), in order of first
// appearance, and labels each group.
func GroupRuns(runs []*Run) []*Group {
	var groups []*Group
	byKey := map[string]*Group{}
	for _, r := range runs {
		if r.ConfigKey == "" {
			groups = append(groups, &Group{Runs: []*Run{r}})
			continue
		}
		if g, ok := byKey[r.ConfigKey]; ok {
			g.Runs = append(g.Runs, r)
			continue
		}
		g := &Group{Runs: []*Run{r}}
		byKey[r.ConfigKey] = g
		groups = append(groups, g)
	}
	labelGroups(groups)
	diffGroups(groups)
	return groups
}

func labelGroups(groups []*Group) {
	seen := map[string]int{}
	for _, g := range groups {
		if len(g.Runs) == 1 {
			g.Label = g.Runs[0].Name
		} else {
			stem := seedSuffix.ReplaceAllString(g.Runs[0].Name, "")
			same := stem != ""
			for _, r := range g.Runs[1:] {
				if seedSuffix.ReplaceAllString(r.Name, "") != stem {
					same = false
				}
			}
			if same {
				g.Label = stem
			} else {
				g.Label = fmt.Sprintf("%s +%d", g.Runs[0].Name, len(g.Runs)-1)
			}
			unit := "seeds"
			seeds := map[int64]bool{}
			for _, r := range g.Runs {
				if r.Seed == nil || seeds[*r.Seed] {
					unit = "runs" // seeds unknown or repeated
					break
				}
				seeds[*r.Seed] = true
			}
			g.Label += fmt.Sprintf(" (%d %s)", len(g.Runs), unit)
		}
		seen[g.Label]++
		if n := seen[g.Label]; n > 1 {
			g.Label += fmt.Sprintf(" #%d", n)
		}
	}
}

// diffGroups fills Differs: the flattened config entries whose values are not
// the same in every group that has a config.
func diffGroups(groups []*Group) {
	flat := make([]map[string]string, len(groups))
	keys := map[string]bool{}
	n := 0
	for i, g := range groups {
		if g.Runs[0].Config == nil {
			continue
		}
		n++
		flat[i] = map[string]string{}
		flatten("", jsonable(stripKeys(g.Runs[0].Config)), flat[i])
		for k := range flat[i] {
			keys[k] = true
		}
	}
	if n < 2 {
		return
	}
	var sorted []string
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		var first string
		differ, init := false, false
		for i := range groups {
			if flat[i] == nil {
				continue
			}
			v, ok := flat[i][k]
			if !ok {
				v = "(unset)"
			}
			if !init {
				first, init = v, true
			} else if v != first {
				differ = true
			}
		}
		if !differ {
			continue
		}
		for i, g := range groups {
			if flat[i] == nil {
				continue
			}
			v, ok := flat[i][k]
			if !ok {
				v = "(unset)"
			}
			g.Differs = append(g.Differs, k+"="+v)
		}
	}
}

func flatten(prefix string, v any, out map[string]string) {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			flatten(p, x, out)
		}
	case string:
		out[prefix] = t
	default:
		b, _ := json.Marshal(t)
		out[prefix] = string(b)
	}
}

// smooth returns the trailing moving average of ys over w points (the mean of
// y[i-w+1..i], fewer at the start); w ≤ 1 returns ys unchanged.
func smooth(ys []float64, w int) []float64 {
	if w <= 1 {
		return ys
	}
	out := make([]float64, len(ys))
	sum := 0.0
	for i, y := range ys {
		sum += y
		if i >= w {
			sum -= ys[i-w]
		}
		out[i] = sum / float64(min(i+1, w))
	}
	return out
}

// band is a group's curve: per x, the mean, min and max over the group's runs
// and how many runs have a value there.
type band struct {
	X, Mean, Lo, Hi []float64
	N               []int
}

// aggregate merges per-run series (each sorted by x) at equal x values.
func aggregate(xs, ys [][]float64) band {
	type acc struct {
		sum, lo, hi float64
		n           int
	}
	m := map[float64]*acc{}
	for i := range xs {
		for j, x := range xs[i] {
			y := ys[i][j]
			a, ok := m[x]
			if !ok {
				a = &acc{lo: math.Inf(1), hi: math.Inf(-1)}
				m[x] = a
			}
			a.sum += y
			a.n++
			a.lo = math.Min(a.lo, y)
			a.hi = math.Max(a.hi, y)
		}
	}
	var b band
	for x := range m {
		b.X = append(b.X, x)
	}
	sort.Float64s(b.X)
	for _, x := range b.X {
		a := m[x]
		b.Mean = append(b.Mean, a.sum/float64(a.n))
		b.Lo = append(b.Lo, a.lo)
		b.Hi = append(b.Hi, a.hi)
		b.N = append(b.N, a.n)
	}
	return b
}
