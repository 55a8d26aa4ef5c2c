package textlab

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/empo2/empo2/environments"
)

// Tip truth (environments.TipChecker): what a tip written after a textlab
// episode claims, checked against the episode's trajectory.
//
// The claim vocabulary is the one of the tips the SFT data teaches
// (trainer/demos.Tip), one claim sentence each, ending with a period:
//
//	I looked around the R1, the R2 and the R3.   each Ri's room listing ("This room is called the Ri.") was observed
//	I went to the R1 and the R2.                 the agent arrived in each Ri ("You move/teleport to the Ri.")
//	I tried A1, A2, ….                            each action Ai was taken ("…" stands for more and claims nothing)
//	Score came from A1 (+g1) in the R1 and A2 (+g2).
//	                                              a step took action Ai, earned exactly gi, and (when named) left the agent in Ri;
//	                                              without "(+gi)": earned score (a positive reward)
//	Score was lost at A (-g) in the R.            the same for a step that lost g (without "(-g)": lost score)
//	No action earned score.                       no step had a positive reward
//	The task is complete with score S/100.        the final score is S and the task was completed (100)
//	The episode failed with score S/100.          the final score is S and it is negative (a failure)
//	The episode ended with score S/100, short of the full score.
//	                                              the final score is S, below 100
//	The task is not complete: score S/100 after N steps.
//	                                              the final score is S, below 100, after exactly N steps
//	The task is complete. / The episode failed. / The task is not complete.
//	                                              the final score is 100 / negative / below 100
//
// Rooms after "in the" are the house's rooms (roomNames), so an action
// that itself says "in the red box" stays one action; a room list may name
// any room (one the house lacks is a false claim).
//
// Each room, action item and ending sentence is one claim. Any other
// sentence (including one cut off before its period) is unparsed. The
// facts come from the observations only, in the formats world.go writes:
// the starting room from the first observation's listing, the agent's
// room after each step from "You move/teleport to the R." (the room a
// step's claim names is the room after the step, as demos record it).

// CheckTip checks tip against tr (see the file comment).
func CheckTip(tip string, tr environments.Trajectory) environments.TipVerdict {
	f := trajectoryFacts(tr)
	var v environments.TipVerdict
	sentences, rest := splitSentences(tip)
	if rest != "" {
		v.Unparsed = append(v.Unparsed, rest)
	}
	for _, s := range sentences {
		n, bad, ok := f.check(s)
		if !ok {
			v.Unparsed = append(v.Unparsed, s)
			continue
		}
		v.Claims += n
		v.False = append(v.False, bad...)
	}
	return v
}

type tipChecker struct{}

func (tipChecker) CheckTip(tip string, tr environments.Trajectory) environments.TipVerdict {
	return CheckTip(tip, tr)
}

var _ environments.TipChecker = tipChecker{}

// facts are what a trajectory shows.
type facts struct {
	looked  map[string]bool // rooms whose listing was observed
	arrived map[string]bool // rooms a step moved the agent to
	steps   []stepFact
	score   float64
}

type stepFact struct {
	action string // normalized
	room   string // the agent's room after the step ("" when unknown)
	reward float64
}

var (
	listingRe = regexp.MustCompile(`This room is called the ([^.\n]+)\.`)
	arriveRe  = regexp.MustCompile(`^You (?:move|teleport) to the ([^.\n]+)\.$`)
)

func trajectoryFacts(tr environments.Trajectory) facts {
	f := facts{looked: map[string]bool{}, arrived: map[string]bool{}, score: tr.Score}
	room := ""
	if m := listingRe.FindStringSubmatch(tr.FirstObs); m != nil {
		room = m[1]
		f.looked[room] = true
	}
	for _, s := range tr.Steps {
		if m := arriveRe.FindStringSubmatch(strings.TrimSpace(s.Observation)); m != nil {
			room = m[1]
			f.arrived[room] = true
		}
		if m := listingRe.FindStringSubmatch(s.Observation); m != nil {
			room = m[1]
			f.looked[room] = true
		}
		f.steps = append(f.steps, stepFact{action: normalize(s.Action), room: room, reward: s.Reward})
	}
	return f
}

// splitSentences cuts a tip after every period followed by white space or
// the end; rest is trailing text without a period.
func splitSentences(tip string) (sentences []string, rest string) {
	s := strings.Join(strings.Fields(tip), " ")
	for s != "" {
		i := strings.Index(s, ". ")
		if i < 0 {
			if strings.HasSuffix(s, ".") {
				return append(sentences, s[:len(s)-1]), ""
			}
			return sentences, s
		}
		sentences = append(sentences, s[:i])
		s = s[i+2:]
	}
	return sentences, ""
}

const num = `(-?[0-9]+(?:\.[0-9]+)?)`

var (
	lookedRe = regexp.MustCompile(`^I looked around (.+)$`)
	wentRe   = regexp.MustCompile(`^I went to (.+)$`)
	triedRe  = regexp.MustCompile(`^I tried (.+)$`)
	gainsRe  = regexp.MustCompile(`^Score came from (.+)$`)
	lossesRe = regexp.MustCompile(`^Score was lost at (.+)$`)
	endings  = map[string]func(score float64) bool{
		"The task is complete":     func(s float64) bool { return s >= 100 },
		"The episode failed":       func(s float64) bool { return s < 0 },
		"The task is not complete": func(s float64) bool { return s < 100 },
	}
	completeRe    = regexp.MustCompile(`^The task is complete with score ` + num + `/100$`)
	failedRe      = regexp.MustCompile(`^The episode failed with score ` + num + `/100$`)
	endedRe       = regexp.MustCompile(`^The episode ended with score ` + num + `/100, short of the full score$`)
	notCompleteRe = regexp.MustCompile(`^The task is not complete: score ` + num + `/100 after ([0-9]+) steps$`)
	theRoomRe     = regexp.MustCompile(`^the ([a-z][a-z ]*)$`)
	listSepRe     = regexp.MustCompile(`, and |, | and `)
	// one "A (+g) in the R" item ("(+g)" and "in the R" optional) and the separator after it
	itemRe = regexp.MustCompile(`^(.+?)(?: \(([+-])([0-9]+(?:\.[0-9]+)?)\))?(?: in the (` + strings.Join(roomNames, "|") + `))?(, and |, | and |$)`)
)

const noGain = "No action earned score"

// check parses one sentence: n claims, the false ones in words, ok = it is
// a claim sentence of the vocabulary.
func (f facts) check(s string) (n int, bad []string, ok bool) {
	if s == noGain {
		for i, st := range f.steps {
			if st.reward > 0 {
				return 1, []string{fmt.Sprintf("%q: step %d (%s) earned %s", s, i+1, st.action, fmtNum(st.reward))}, true
			}
		}
		return 1, nil, true
	}
	if holds, ok := endings[s]; ok {
		if !holds(f.score) {
			bad = append(bad, fmt.Sprintf("%q; the episode ended at %s", s, fmtNum(f.score)))
		}
		return 1, bad, true
	}
	if m := lookedRe.FindStringSubmatch(s); m != nil {
		return f.rooms(m[1], f.looked, "never saw the listing of the %s")
	}
	if m := wentRe.FindStringSubmatch(s); m != nil {
		return f.rooms(m[1], f.arrived, "never moved to the %s")
	}
	if m := triedRe.FindStringSubmatch(s); m != nil {
		for _, a := range strings.Split(m[1], ", ") {
			if a == "…" || a == "..." {
				continue
			}
			if a == "" {
				return 0, nil, false
			}
			n++
			if !f.took(normalize(a)) {
				bad = append(bad, fmt.Sprintf("never took %q", a))
			}
		}
		return n, bad, n > 0
	}
	if m := gainsRe.FindStringSubmatch(s); m != nil {
		return f.items(m[1], "+")
	}
	if m := lossesRe.FindStringSubmatch(s); m != nil {
		return f.items(m[1], "-")
	}
	if m := completeRe.FindStringSubmatch(s); m != nil {
		sc := parseNum(m[1])
		switch {
		case f.score < 100:
			bad = append(bad, fmt.Sprintf("claims completion; the episode ended at %s", fmtNum(f.score)))
		case !same(sc, f.score):
			bad = append(bad, fmt.Sprintf("claims score %s; it was %s", fmtNum(sc), fmtNum(f.score)))
		}
		return 1, bad, true
	}
	if m := failedRe.FindStringSubmatch(s); m != nil {
		sc := parseNum(m[1])
		switch {
		case f.score >= 0:
			bad = append(bad, fmt.Sprintf("claims failure; the episode ended at %s", fmtNum(f.score)))
		case !same(sc, f.score):
			bad = append(bad, fmt.Sprintf("claims score %s; it was %s", fmtNum(sc), fmtNum(f.score)))
		}
		return 1, bad, true
	}
	if m := endedRe.FindStringSubmatch(s); m != nil {
		return 1, f.partial(parseNum(m[1])), true
	}
	if m := notCompleteRe.FindStringSubmatch(s); m != nil {
		bad = f.partial(parseNum(m[1]))
		if k, _ := strconv.Atoi(m[2]); k != len(f.steps) {
			bad = append(bad, fmt.Sprintf("claims %d steps; the episode took %d", k, len(f.steps)))
		}
		return 1, bad, true
	}
	return 0, nil, false
}

// partial checks "score S, short of the full score".
func (f facts) partial(sc float64) []string {
	switch {
	case f.score >= 100:
		return []string{fmt.Sprintf("claims the task is unfinished at %s; it was completed", fmtNum(sc))}
	case !same(sc, f.score):
		return []string{fmt.Sprintf("claims score %s; it was %s", fmtNum(sc), fmtNum(f.score))}
	}
	return nil
}

// rooms checks a list "the R1, the R2 and the R3" against set.
func (f facts) rooms(list string, set map[string]bool, falseMsg string) (n int, bad []string, ok bool) {
	for _, it := range listSepRe.Split(list, -1) {
		m := theRoomRe.FindStringSubmatch(it)
		if m == nil {
			return 0, nil, false
		}
		n++
		if !set[m[1]] {
			bad = append(bad, fmt.Sprintf(falseMsg, m[1]))
		}
	}
	return n, bad, true
}

// items checks a list "A1 (+g1) in the R1 and A2 (+g2)" whose signs are sign.
func (f facts) items(list, sign string) (n int, bad []string, ok bool) {
	for list != "" {
		m := itemRe.FindStringSubmatch(list)
		if m == nil || (m[2] != "" && m[2] != sign) {
			return 0, nil, false
		}
		list = list[len(m[0]):]
		if m[5] != "" && list == "" {
			return 0, nil, false // a dangling separator
		}
		n++
		act, room := normalize(m[1]), m[4]
		g := math.NaN() // no amount: any reward of the sign
		if m[3] != "" {
			g = parseNum(m[3])
		}
		if sign == "-" {
			g = -g
		}
		if msg := f.item(act, sign, g, room); msg != "" {
			bad = append(bad, msg)
		}
	}
	return n, bad, n > 0
}

// item checks one "A (±g) in the R": some step took A, earned g (NaN: any
// reward of the sign) and (when room is named) left the agent in room; the
// message says why not.
func (f facts) item(act, sign string, g float64, room string) string {
	var rewards []string
	var rooms []string
	for _, st := range f.steps {
		if st.action != act {
			continue
		}
		amount := same(st.reward, g) || (math.IsNaN(g) && (sign == "+") == (st.reward > 0) && st.reward != 0)
		if amount && (room == "" || st.room == room) {
			return ""
		}
		rewards = append(rewards, fmtNum(st.reward))
		rooms = append(rooms, st.room)
	}
	claim := fmt.Sprintf("%s (%+g)", act, g)
	if math.IsNaN(g) {
		claim = fmt.Sprintf("%s (%s)", act, sign)
	}
	if room != "" {
		claim += " in the " + room
	}
	if len(rewards) == 0 {
		return claim + ": the action was never taken"
	}
	return fmt.Sprintf("%s: taken with reward %s in %s", claim, strings.Join(rewards, ", "), strings.Join(rooms, ", "))
}

func (f facts) took(act string) bool {
	for _, st := range f.steps {
		if st.action == act {
			return true
		}
	}
	return false
}

func parseNum(s string) float64 {
	v, _ := strconv.ParseFloat(s, 64) // the callers' regexps only pass numbers
	return v
}

func fmtNum(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func same(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
