package scienceworld

import "github.com/empo2/empo2/environments"

// taskInfo is one row of ScienceWorld 1.3.0's task table.
type taskInfo struct {
	id, name   string
	variations int
	limit      int // EMPO² recipe's per-task step limit
	summary    string
}

// taskTable lists the 30 tasks (ids, names and variation counts of
// ScienceWorld 1.3.0) with the per-task step limits of the EMPO² recipe:
// boil 100; melt, freeze, change-the-state-of-matter-of 80;
// measure-melting-point-known-substance 120; grow-fruit and chemistry-mix
// 60; others 30. The integration test checks names and counts against the
// jar when SCIENCEWORLD_JAR is set.
var taskTable = []taskInfo{
	{"1-1", "boil", 30, 100, "boil a substance"},
	{"1-2", "melt", 30, 80, "melt a substance"},
	{"1-3", "freeze", 30, 80, "freeze a substance"},
	{"1-4", "change-the-state-of-matter-of", 30, 80, "change a substance's state of matter"},
	{"2-1", "use-thermometer", 540, 30, "measure an object's temperature and sort it by a threshold"},
	{"2-2", "measure-melting-point-known-substance", 436, 120, "measure the melting point of a known substance"},
	{"2-3", "measure-melting-point-unknown-substance", 300, 30, "measure the melting point of an unknown substance"},
	{"3-1", "power-component", 20, 30, "power an electrical component with a circuit"},
	{"3-2", "power-component-renewable-vs-nonrenewable-energy", 20, 30, "power a component and tell renewable from non-renewable sources"},
	{"3-3", "test-conductivity", 900, 30, "test whether an object conducts electricity"},
	{"3-4", "test-conductivity-of-unknown-substances", 600, 30, "test the conductivity of an unknown substance"},
	{"4-1", "find-living-thing", 300, 30, "find a living thing and move it to a box"},
	{"4-2", "find-non-living-thing", 300, 30, "find a non-living thing and move it to a box"},
	{"4-3", "find-plant", 300, 30, "find a plant and move it to a box"},
	{"4-4", "find-animal", 300, 30, "find an animal and move it to a box"},
	{"5-1", "grow-plant", 126, 30, "grow a plant from a seed"},
	{"5-2", "grow-fruit", 126, 60, "grow a plant that bears fruit"},
	{"6-1", "chemistry-mix", 32, 60, "mix chemicals into a new substance"},
	{"6-2", "chemistry-mix-paint-secondary-color", 36, 30, "mix paints into a secondary colour"},
	{"6-3", "chemistry-mix-paint-tertiary-color", 36, 30, "mix paints into a tertiary colour"},
	{"7-1", "lifespan-longest-lived", 125, 30, "find the longest-lived living thing"},
	{"7-2", "lifespan-shortest-lived", 125, 30, "find the shortest-lived living thing"},
	{"7-3", "lifespan-longest-lived-then-shortest-lived", 125, 30, "find the longest- then the shortest-lived living thing"},
	{"8-1", "identify-life-stages-1", 14, 30, "focus on the life stages of a plant or animal in order"},
	{"8-2", "identify-life-stages-2", 10, 30, "focus on the life stages of an animal in order"},
	{"9-1", "inclined-plane-determine-angle", 168, 30, "find the inclined plane with the steepest angle"},
	{"9-2", "inclined-plane-friction-named-surfaces", 1386, 30, "compare the friction of named inclined planes"},
	{"9-3", "inclined-plane-friction-unnamed-surfaces", 162, 30, "compare the friction of unnamed inclined planes"},
	{"10-1", "mendelian-genetics-known-plant", 120, 30, "predict a trait of a known plant with Mendelian genetics"},
	{"10-2", "mendelian-genetics-unknown-plant", 480, 30, "predict a trait of an unknown plant with Mendelian genetics"},
}

// Tasks lists the 30 tasks with the simulator's train/dev/test split rule
// (computed locally: it depends only on the variation count), so listing
// needs no JVM.
func Tasks(environments.Options) ([]environments.Task, error) {
	out := make([]environments.Task, 0, len(taskTable))
	for _, t := range taskTable {
		out = append(out, environments.WithSplits(environments.Task{
			Name:        t.name,
			Description: t.id + ": " + t.summary,
			Variations:  t.variations,
			StepLimit:   t.limit,
		}))
	}
	return out, nil
}

// lookupTask accepts a task name or its id ("3-1").
func lookupTask(name string) (taskInfo, bool) {
	for _, t := range taskTable {
		if t.name == name || t.id == name {
			return t, true
		}
	}
	return taskInfo{}, false
}

// Simplification labels the simulator knows; "easy" is expanded by the
// simulator itself (teleportAction, openDoors, selfWateringFlowerPots, plus
// noElectricalAction except on electrical tasks).
var Simplifications = []string{"teleportAction", "selfWateringFlowerPots", "openContainers", "openDoors", "noElectricalAction"}
