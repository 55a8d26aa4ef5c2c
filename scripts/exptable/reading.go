package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/empo2/empo2/environments/textlab"
	"github.com/empo2/empo2/trainer/evaluate"
	"github.com/empo2/empo2/trainer/rollout"
)

// Does the policy read its memory? (issue 36, after gate run 4.) From the
// episodes an `empo2 eval --ood --episodes-out FILE` played, per file:
//
//   - reading steps: memory-on steps whose block's best-scored entries
//     (score ≥ 100: an episode that succeeded) all name one action A — the
//     block says what the successful attempt did in this state;
//   - copied: the policy's action was A;
//   - room choices: the reading steps whose A is "teleport to R" — where
//     the memory, not the observation, says which room comes next (the
//     chance of naming R unread is about one in the rooms offered);
//   - trial 1's room again: in the trials 2…K, the steps whose
//     observation the variation's trial 1 met too, when trial 1 succeeded
//     and answered it with "teleport to R" — how often R was chosen again,
//     with memory and in the control (what the policy does there with no
//     block to read);
//   - beyond the habit: the two repeat rates' difference (memory on −
//     control, in points). A policy that repeats trial 1's rooms as often
//     without a block as with one copies out of habit, not by reading
//     (correction of 2026-12-02: gate run 5's 96 % "copied" sat beside a
//     control that repeated 99 %): only this column, or a teacher-forced
//     loss with and without the block, says whether the block is read;
//   - unknown actions: in the trials 2…K, the steps whose observation is
//     textlab's (and ScienceWorld's) answer to an action no command
//     matches, with memory and in the control — a block that makes the
//     policy answer with fragments of tip text shows here (gate run 6);
//   - the mean score of trials 2…K with memory and without (the gate's
//     per-seed figure, recomputed from the episodes).

// readingStats is one transcript file's figures.
type readingStats struct {
	Name               string
	Steps, Blocks      int // memory-on steps, those with a block
	Reading, Copied    int
	Rooms, RoomsCopied int
	// the control's room choices at trial 1's observations, and its
	// repeats of trial 1's room
	CtlRooms, CtlRepeated int
	// the same with memory on (trials 2…K)
	OnRooms, OnRepeated int
	// steps of the trials 2…K and those answered "no known action", with
	// memory and in the control
	OnLaterSteps, OnUnknown, CtlLaterSteps, CtlUnknown int
	OnLater, OffLater                                  float64 // mean score of trials 2…K
	onN, offN                                          int
}

func loadReading(path string) (*readingStats, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st := &readingStats{Name: filepath.Base(path)}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var all []evaluate.Transcript
	for n := 1; sc.Scan(); n++ {
		var t evaluate.Transcript
		if err := json.Unmarshal(sc.Bytes(), &t); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		all = append(all, t)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	// trial 1's room choices per variation, by the observation they answered
	// (first visit), when trial 1 succeeded
	type variation struct {
		task string
		v    int
	}
	firstRooms := map[variation]map[string]string{}
	for _, t := range all {
		if t.Trial != 1 || t.Score < 100 {
			continue
		}
		k := variation{t.Task, t.Variation}
		if firstRooms[k] != nil {
			continue // trial 1 is the same episode in both settings
		}
		m := map[string]string{}
		obs := t.FirstObs
		for _, s := range t.Steps {
			if _, seen := m[obs]; !seen {
				m[obs] = "" // the first visit decides; "" = no room choice
				if strings.HasPrefix(s.Action, "teleport to ") {
					m[obs] = s.Action
				}
			}
			obs = s.Observation
		}
		firstRooms[k] = m
	}
	for _, t := range all {
		if t.Trial < 2 {
			continue
		}
		rooms, repeated := &st.CtlRooms, &st.CtlRepeated
		steps, unknown := &st.CtlLaterSteps, &st.CtlUnknown
		if t.Setting == evaluate.MemoryOn {
			rooms, repeated = &st.OnRooms, &st.OnRepeated
			steps, unknown = &st.OnLaterSteps, &st.OnUnknown
		}
		m := firstRooms[variation{t.Task, t.Variation}]
		obs := t.FirstObs
		for _, s := range t.Steps {
			*steps++
			if strings.TrimSpace(s.Observation) == textlab.UnknownAction {
				*unknown++
			}
			if a := m[obs]; a != "" {
				*rooms++
				if strings.TrimSpace(s.Action) == a {
					*repeated++
				}
			}
			obs = s.Observation
		}
	}
	for _, t := range all {
		if t.Trial >= 2 {
			if t.Setting == evaluate.MemoryOn {
				st.OnLater += t.Score
				st.onN++
			} else {
				st.OffLater += t.Score
				st.offN++
			}
		}
		if t.Setting != evaluate.MemoryOn {
			continue
		}
		for _, s := range t.Steps {
			st.Steps++
			if s.Tips == "" {
				continue
			}
			st.Blocks++
			best, acts := -1e9, map[string]bool{}
			for _, line := range strings.Split(s.Tips, "\n") {
				_, a, score, ok := rollout.ParseTipContent(line)
				switch {
				case !ok:
				case score > best:
					best, acts = score, map[string]bool{a: true}
				case score == best:
					acts[a] = true
				}
			}
			if best < 100 || len(acts) != 1 {
				continue
			}
			var a string
			for a = range acts {
			}
			st.Reading++
			copied := strings.TrimSpace(s.Action) == a
			if copied {
				st.Copied++
			}
			if strings.HasPrefix(a, "teleport to ") {
				st.Rooms++
				if copied {
					st.RoomsCopied++
				}
			}
		}
	}
	if st.onN > 0 {
		st.OnLater /= float64(st.onN)
	}
	if st.offN > 0 {
		st.OffLater /= float64(st.offN)
	}
	return st, nil
}

func writeReading(w io.Writer, sts []*readingStats) {
	fmt.Fprintln(w, "| episodes file | trials 2…K, memory on | control | blocks shown | reading steps (best entry scored 100, one action) | copied | room choices among them | room copied | trial 1's room again: memory on | control | beyond the habit (on − control, points) | unknown actions, trials 2…K: memory on | control |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	pct := func(a, b int) string {
		if b == 0 {
			return "–"
		}
		return fmt.Sprintf("%d/%d (%.0f %%)", a, b, 100*float64(a)/float64(b))
	}
	for _, s := range sts {
		beyond := "–"
		if s.OnRooms > 0 && s.CtlRooms > 0 {
			beyond = fmt.Sprintf("%+.0f", 100*(float64(s.OnRepeated)/float64(s.OnRooms)-float64(s.CtlRepeated)/float64(s.CtlRooms)))
		}
		fmt.Fprintf(w, "| %s | %.1f | %.1f | %d of %d steps | %d | %s | %d | %s | %s | %s | %s | %s | %s |\n", s.Name, s.OnLater, s.OffLater, s.Blocks, s.Steps,
			s.Reading, pct(s.Copied, s.Reading), s.Rooms, pct(s.RoomsCopied, s.Rooms), pct(s.OnRepeated, s.OnRooms), pct(s.CtlRepeated, s.CtlRooms), beyond,
			pct(s.OnUnknown, s.OnLaterSteps), pct(s.CtlUnknown, s.CtlLaterSteps))
	}
}
