package demos

import (
	"strings"

	"github.com/empo2/empo2/environments"
)

// TrajectoryTip is the oracle tip of a played episode (`rollout.oracle_tips`,
// Study 3's oracle-memory control): Tip of the trajectory, the code-written
// tip whose every claim textlab's tip checker verifies on the episode's own
// observations (TestOracleTipsAreTrue). The rooms after each step are read
// from the observations as the demos record them; an episode that looked
// around says which rooms it looked at (the explore demos' wording), one
// that did not which rooms it went to.
func TrajectoryTip(tr environments.Trajectory) string {
	d := Demo{Task: tr.Task, Variation: tr.Variation, Kind: KindGold, FirstObs: tr.FirstObs, Score: tr.Score}
	room := firstRoom(tr.FirstObs)
	for _, s := range tr.Steps {
		if m := arrivedRe.FindStringSubmatch(s.Observation); m != nil {
			room = m[1]
		}
		if strings.TrimSpace(s.Action) == "look around" {
			d.Kind = KindExplore
		}
		d.Steps = append(d.Steps, Step{Action: s.Action, Observation: s.Observation, Reward: s.Reward, Room: room})
	}
	d.Done = d.Score >= 100
	return Tip(d)
}
