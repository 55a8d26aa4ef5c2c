package report

import (
	"encoding/json"
	"errors"
	"sort"
	"strings"
)

// OOD is an out-of-distribution adaptation result (`empo2 eval --ood`,
// evaluate.OODReport): the mean score
// and success rate per trial index, with memory (tips written after each
// trial) and without memory (the control).
type OOD struct {
	// Score[on] and Success[on]: per trial index 1..K (index 0 = trial 1);
	// on=true is memory on. A side absent from the file has no entry.
	Score   map[bool][]float64
	Success map[bool][]float64
}

// Trials is the largest number of trials of any side.
func (o *OOD) Trials() int {
	n := 0
	for _, s := range o.Score {
		n = max(n, len(s))
	}
	for _, s := range o.Success {
		n = max(n, len(s))
	}
	return n
}

// parseOOD recognises an OOD result and extracts its per-trial curves. The
// file is OOD when it has a top-level "ood" or "trials" key (trainer.OODReport
// as `empo2 eval --ood --json` writes it) or a side (memory_on,
// memory_off; or the top level itself) with per-trial data, given either as
// numeric arrays whose key names a trial ("score_per_trial", "per_trial",
// "trial_scores", "success_per_trial", …) or as an array of per-trial objects
// ({"trial":1,"score_mean":…,"success_rate":…}) under a key containing
// "trial". ok=false: not an OOD file; ok=true with err: an OOD file whose
// trial data could not be read.
func parseOOD(top map[string]json.RawMessage) (o *OOD, ok bool, err error) {
	o = &OOD{Score: map[bool][]float64{}, Success: map[bool][]float64{}}
	_, hasOOD := top["ood"]
	if _, ok := top["trials"]; ok {
		hasOOD = true // trainer.OODReport: {"tasks","variations","trials":K,"memory_on":{…},"memory_off":{…}}
	}
	// An "ood" key holding an object with the sides is unwrapped.
	if raw, isObj := top["ood"]; isObj {
		var inner map[string]json.RawMessage
		if json.Unmarshal(raw, &inner) == nil && inner != nil {
			top = inner
		}
	}
	found := false
	for _, side := range []struct {
		key string
		on  bool
	}{{"memory_on", true}, {"memory_off", false}} {
		raw, present := top[side.key]
		if !present {
			continue
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			continue
		}
		sc, su := trialCurves(obj)
		if sc != nil || su != nil {
			found = true
			if sc != nil {
				o.Score[side.on] = sc
			}
			if su != nil {
				o.Success[side.on] = su
			}
		}
	}
	if !found {
		// Per-trial arrays at the top level count as memory on (the OOD
		// protocol's main arm).
		if sc, su := trialCurves(top); sc != nil || su != nil {
			found = true
			if sc != nil {
				o.Score[true] = sc
			}
			if su != nil {
				o.Success[true] = su
			}
		}
	}
	if !found {
		if hasOOD {
			return nil, true, errors.New("no per-trial scores found")
		}
		return nil, false, nil
	}
	return o, true, nil
}

// trialCurves finds per-trial score and success curves in one JSON object.
func trialCurves(obj map[string]json.RawMessage) (score, success []float64) {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys) // deterministic choice when several keys match
	for _, k := range keys {
		lk := strings.ToLower(k)
		if !strings.Contains(lk, "trial") {
			continue
		}
		var nums []float64
		if json.Unmarshal(obj[k], &nums) == nil && len(nums) > 0 {
			switch {
			case strings.Contains(lk, "success"):
				if success == nil {
					success = nums
				}
			case strings.Contains(lk, "score"):
				score = nums // a key naming the score wins over a generic one
			case strings.Contains(lk, "tips"):
				// tips written per trial: not a score
			case score == nil:
				score = nums
			}
			continue
		}
		var objs []map[string]any
		if json.Unmarshal(obj[k], &objs) == nil && len(objs) > 0 {
			sc, su := make([]float64, len(objs)), make([]float64, len(objs))
			okSc, okSu := true, true
			for i, t := range objs {
				idx := i
				if v, ok := toFloat(t["trial"]); ok && int(v) >= 1 && int(v) <= len(objs) {
					idx = int(v) - 1 // trial indices are 1-based
				}
				if v, ok := firstFloat(t, "score_mean", "score"); ok {
					sc[idx] = v
				} else {
					okSc = false
				}
				if v, ok := firstFloat(t, "success_rate", "success"); ok {
					su[idx] = v
				} else {
					okSu = false
				}
			}
			if okSc && score == nil {
				score = sc
			}
			if okSu && success == nil {
				success = su
			}
		}
	}
	return score, success
}

func firstFloat(m map[string]any, keys ...string) (float64, bool) {
	for _, k := range keys {
		if v, ok := toFloat(m[k]); ok {
			return v, true
		}
	}
	return 0, false
}
