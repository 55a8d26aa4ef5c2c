package textlab

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// lab builds the house with a battery, two wires and two bulbs in the
// workshop, all doors open, the agent in the workshop.
func lab(t *testing.T) *world {
	t.Helper()
	h := buildHouse(simplifications{openDoors: true})
	w := h.w
	h.put(&obj{base: "battery", flags: fPortable | fBattery}, spot{"workshop", ""})
	h.put(&obj{base: "red wire", flags: fPortable | fWire}, spot{"workshop", ""})
	h.put(&obj{base: "blue wire", flags: fPortable | fWire}, spot{"workshop", ""})
	h.put(&obj{base: "green light bulb", flags: fPortable | fBulb}, spot{"workshop", ""})
	h.put(&obj{base: "white light bulb", flags: fPortable | fBulb}, spot{"workshop", ""})
	w.room = h.rooms["workshop"]
	return w
}

func mustAct(t *testing.T, w *world, a string) string {
	t.Helper()
	obs, ev := w.act(a)
	require.True(t, ev.ok, "%q: %s", a, obs)
	return obs
}

func TestCircuit(t *testing.T) {
	lit := func(w *world, name string) bool { return w.objs[w.objByName(name)].lit }

	// Reversed polarity lights the bulb too.
	w := lab(t)
	mustAct(t, w, "connect battery cathode to red wire terminal 1")
	mustAct(t, w, "connect red wire terminal 2 to green light bulb terminal 2")
	require.False(t, lit(w, "green light bulb"), "half a circuit")
	mustAct(t, w, "connect green light bulb terminal 1 to blue wire terminal 2")
	mustAct(t, w, "connect blue wire terminal 1 to battery anode")
	require.True(t, lit(w, "green light bulb"))
	require.False(t, lit(w, "white light bulb"), "the other bulb is not in the circuit")
	require.Contains(t, mustAct(t, w, "look around"), "a green light bulb, which is on")
	mustAct(t, w, "disconnect blue wire")
	require.False(t, lit(w, "green light bulb"))

	// Both bulb terminals on the same pole: no light.
	w = lab(t)
	mustAct(t, w, "connect battery anode to red wire terminal 1")
	mustAct(t, w, "connect red wire terminal 2 to green light bulb terminal 1")
	mustAct(t, w, "connect green light bulb terminal 2 to battery anode")
	require.False(t, lit(w, "green light bulb"))

	// A short circuit (anode straight to cathode through a wire) lights nothing.
	w = lab(t)
	mustAct(t, w, "connect battery anode to green light bulb terminal 1")
	mustAct(t, w, "connect green light bulb terminal 2 to battery cathode")
	require.True(t, lit(w, "green light bulb"), "a bulb straight on the poles")
	mustAct(t, w, "connect battery anode to red wire terminal 1")
	mustAct(t, w, "connect red wire terminal 2 to battery cathode")
	require.False(t, lit(w, "green light bulb"), "shorted battery")

	// Self-connections and duplicates are refused.
	w = lab(t)
	require.Contains(t, mustAct(t, w, "connect red wire terminal 1 to red wire terminal 2"), "itself")
	mustAct(t, w, "connect red wire terminal 1 to battery anode")
	require.Contains(t, mustAct(t, w, "connect battery anode to red wire terminal 1"), "already connected")
}

func TestContainersHideContents(t *testing.T) {
	h := buildHouse(simplifications{})
	w := h.w
	h.put(&obj{base: "frog", flags: fPortable | fLiving | fAnimal}, spot{"bedroom", "closet"})
	w.room = h.rooms["bedroom"]
	obs := mustAct(t, w, "look around")
	require.Contains(t, obs, "a closet. The closet door is closed.")
	require.NotContains(t, obs, "frog")
	_, ev := w.act("pick up frog")
	require.False(t, ev.ok, "a hidden object cannot be named")
	require.Equal(t, "The closet is now open.", mustAct(t, w, "open closet"))
	require.Contains(t, mustAct(t, w, "look around"), "In the closet is: a frog.")
	mustAct(t, w, "pick up frog")
	require.Contains(t, mustAct(t, w, "inventory"), "a frog")
	require.Contains(t, mustAct(t, w, "move frog to closet"), "You move the frog to the closet.")
	mustAct(t, w, "close closet")
	require.Equal(t, "The closet is closed.", mustAct(t, w, "move book to closet"))
	require.Equal(t, "The bed can't be picked up.", mustAct(t, w, "pick up bed"))
	require.Equal(t, "You can't move something into itself.", mustAct(t, w, "move book to book"))
	require.Equal(t, "The book is already there.", mustAct(t, w, "move book to bed"))
	mustAct(t, w, "open closet")
	require.Equal(t, "The book can't hold things.", mustAct(t, w, "move frog to book"))
}

func TestHeatAndCold(t *testing.T) {
	h := buildHouse(simplifications{openDoors: true, openContainers: true})
	w := h.w
	water := h.put(&obj{names: [3]string{"ice", "water", "steam"}, flags: fPortable | fSubstance, melt: 0, boil: 100, temp: 20}, spot{"kitchen", "table"})
	w.room = h.rooms["kitchen"]
	o := w.objs[water]
	require.Equal(t, liquid, o.st)

	// The fridge cools to 4 °C and never freezes water.
	mustAct(t, w, "move water to fridge")
	for range 20 {
		w.tick()
	}
	require.Equal(t, 4.0, o.temp)
	require.Equal(t, liquid, o.st)

	// The freezer freezes it; the name follows the state.
	mustAct(t, w, "move water to freezer")
	for range 10 {
		w.tick()
	}
	require.Equal(t, solid, o.st)
	require.Equal(t, "ice", o.name())
	require.Contains(t, mustAct(t, w, "look at freezer"), "a substance called ice")

	// A stove heats only while it is on; water boils into steam.
	mustAct(t, w, "move ice to stove")
	t0 := o.temp
	w.tick()
	require.Equal(t, t0, o.temp, "a stove that is off does not heat")
	mustAct(t, w, "activate stove")
	require.Contains(t, mustAct(t, w, "look around"), "a stove, which is turned on")
	mustAct(t, w, "wait")
	require.Equal(t, gas, o.st)
	require.Equal(t, "steam", o.name())
	require.Contains(t, mustAct(t, w, "use glass cup on steam"), "not clear how to use")
}

func TestMovingAround(t *testing.T) {
	h := buildHouse(simplifications{})
	w := h.w
	require.Equal(t, "The door is not open.", mustAct(t, w, "go to kitchen"))
	require.Equal(t, "It's not clear how to get there from here.", mustAct(t, w, "go to foundry"))
	require.Equal(t, "You are already in the hallway.", mustAct(t, w, "go to hallway"))
	_, ev := w.act("teleport to foundry")
	require.False(t, ev.ok, "no teleporting without the simplification")
	mustAct(t, w, "open door to kitchen")
	require.Equal(t, "The door is already open.", mustAct(t, w, "open kitchen door"))
	mustAct(t, w, "go to the kitchen")
	require.Contains(t, mustAct(t, w, "look around"), "A door to the hallway (that is open)")
	require.Equal(t, []int{h.rooms["outside"], h.rooms["foundry"]}, w.path(h.rooms["kitchen"], h.rooms["foundry"]))
	require.Equal(t, "The door is now closed.", mustAct(t, w, "close door to hallway"))
	require.Equal(t, "The door is not open.", mustAct(t, w, "go to hallway"))
}
