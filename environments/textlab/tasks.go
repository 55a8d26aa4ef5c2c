package textlab

import (
	"fmt"
	"slices"
)

// house is the fixed layout every task starts from: ten rooms joined by
// doors (closed unless the openDoors simplification is on), furniture and a
// few distractors. Tasks add their own items at variation-dependent spots.
type house struct {
	w     *world
	rooms map[string]int
}

// roomNames are the house's rooms, in the order they are built.
var roomNames = []string{"hallway", "kitchen", "bathroom", "outside", "greenhouse", "foundry", "workshop", "bedroom", "living room", "art studio"}

type spot struct {
	room, holder string // holder "" = on the floor of the room
}

func (s spot) String() string {
	if s.holder == "" {
		return s.room
	}
	return s.room + " " + s.holder
}

type simplifications struct {
	openDoors, openContainers, teleport bool
}

func buildHouse(simp simplifications) *house {
	w := newWorld()
	w.teleport = simp.teleport
	h := &house{w: w, rooms: map[string]int{}}
	for _, r := range roomNames {
		h.rooms[r] = w.addRoom(r)
	}
	for _, pair := range [][2]string{
		{"hallway", "art studio"}, {"hallway", "bedroom"}, {"hallway", "greenhouse"},
		{"hallway", "kitchen"}, {"hallway", "living room"}, {"hallway", "workshop"},
		{"kitchen", "bathroom"}, {"kitchen", "outside"}, {"greenhouse", "outside"}, {"outside", "foundry"},
	} {
		w.connectRooms(h.rooms[pair[0]], h.rooms[pair[1]])
	}
	box := fContainer | fOpenable
	furniture := []struct {
		room string
		o    obj
	}{
		{"hallway", obj{base: "picture"}},
		{"kitchen", obj{base: "fridge", flags: box | fCooler, setTemp: 4, rate: 3}},
		{"kitchen", obj{base: "freezer", flags: box | fCooler, setTemp: -10, rate: 5}},
		{"kitchen", obj{base: "stove", flags: fContainer | fSurface | fHeater | fActivatable, setTemp: 250, rate: 30}},
		{"kitchen", obj{base: "cupboard", flags: box}},
		{"kitchen", obj{base: "table", flags: fContainer | fSurface}},
		{"bathroom", obj{base: "cabinet", flags: box}},
		{"bathroom", obj{base: "towel", flags: fPortable}},
		{"outside", obj{base: "fire pit", flags: fContainer | fSurface | fHeater | fActivatable, setTemp: 500, rate: 60}},
		{"outside", obj{base: "rock", flags: fPortable}},
		{"greenhouse", obj{base: "flower pot", flags: fContainer}},
		{"greenhouse", obj{base: "shelf", flags: fContainer | fSurface}},
		{"greenhouse", obj{base: "shovel", flags: fPortable}},
		{"foundry", obj{base: "blast furnace", flags: box | fHeater | fActivatable, setTemp: 1500, rate: 150}},
		{"foundry", obj{base: "anvil"}},
		{"workshop", obj{base: "workbench", flags: fContainer | fSurface}},
		{"workshop", obj{base: "toolbox", flags: box}},
		{"workshop", obj{base: "hammer", flags: fPortable}},
		{"bedroom", obj{base: "bed", flags: fContainer | fSurface}},
		{"bedroom", obj{base: "closet", flags: box}},
		{"living room", obj{base: "couch", flags: fContainer | fSurface}},
		{"living room", obj{base: "chest", flags: box}},
		{"art studio", obj{base: "desk", flags: fContainer | fSurface}},
		{"art studio", obj{base: "wooden cupboard", flags: box}},
		{"art studio", obj{base: "paintbrush", flags: fPortable}},
	}
	for _, f := range furniture {
		o := f.o
		o.temp = 20
		if o.is(fOpenable) && simp.openContainers {
			o.open = true
		}
		w.add(&o, h.rooms[f.room])
	}
	// Small items on the furniture.
	w.add(&obj{base: "book", flags: fPortable, temp: 20}, w.objByName("bed"))
	w.add(&obj{base: "pillow", flags: fPortable, temp: 20}, w.objByName("couch"))
	w.add(&obj{base: "glass cup", flags: fPortable | fContainer, temp: 20}, w.objByName("table"))
	if simp.openDoors {
		for _, d := range w.doors {
			d.open = true
		}
	}
	w.room = h.rooms["hallway"]
	return h
}

// put adds o at spot s and returns its id.
func (h *house) put(o *obj, s spot) int {
	parent := h.rooms[s.room]
	if s.holder != "" {
		parent = h.w.objByName(s.holder)
		if parent < 0 || h.w.roomOf(parent) != h.rooms[s.room] {
			panic("textlab: bad spot " + s.String()) // a bug in the task tables
		}
	}
	if o.temp == 0 && !o.is(fSubstance) {
		o.temp = 20
	}
	return h.w.add(o, parent)
}

// check is one partial-credit milestone; once reached it stays reached.
type check struct {
	points  int
	reached func() bool
}

// episode is a task instance: its world, description and scorer.
type episode struct {
	w        *world
	desc     string
	focusOK  func(id int) bool
	checks   []check
	hit      []bool
	complete func() bool
	failed   func() bool // optional: a non-focus failure
	gold     func(g *goldAgent)
	onEvent  func(ev event) // optional: sees every action's event first

	score int
	done  bool
	won   bool
}

// see updates the score after an action.
func (e *episode) see(ev event) {
	if e.onEvent != nil && !e.done {
		e.onEvent(ev)
	}
	e.observe(ev)
}

func (e *episode) observe(ev event) {
	if e.done {
		return
	}
	if ev.focus >= 0 && !e.focusOK(ev.focus) {
		e.score, e.done = -100, true
		return
	}
	if e.failed != nil && e.failed() {
		e.score, e.done = -100, true
		return
	}
	if e.complete() {
		e.score, e.done, e.won = 100, true, true
		return
	}
	if e.hit == nil {
		e.hit = make([]bool, len(e.checks))
	}
	sum := 0
	for i, c := range e.checks {
		if !e.hit[i] && c.reached() {
			e.hit[i] = true
		}
		if e.hit[i] {
			sum += c.points
		}
	}
	e.score = sum
}

// taskDef is one task family with its procedural variations.
type taskDef struct {
	name, summary string
	heldOut       bool
	stepLimit     int
	variations    int
	build         func(v int, h *house) *episode
}

// scramble maps a variation number onto a parameter index with a fixed
// stride coprime with n, so the contiguous train/dev/test blocks each mix
// all parameter values.
func scramble(v, n int) int {
	k := n*2/5 + 1
	for gcd(k, n) != 1 {
		k++
	}
	return (v * k) % n
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// digits decodes idx in mixed radix (least significant first).
func digits(idx int, radix ...int) []int {
	out := make([]int, len(radix))
	for i, r := range radix {
		out[i] = idx % r
		idx /= r
	}
	return out
}

// ---- tasks ----

var creatures = []struct {
	name  string
	plant bool
}{{"frog", false}, {"turtle", false}, {"rabbit", false}, {"snail", false}, {"parrot", false}, {"butterfly", false}, {"pea plant", true}, {"fern", true}}

var creatureSpots = []spot{{"greenhouse", ""}, {"outside", ""}, {"bedroom", "closet"}, {"living room", "chest"}, {"bathroom", "cabinet"}, {"art studio", "wooden cupboard"}}

var findBoxes = []struct{ color, room string }{{"red", "kitchen"}, {"blue", "workshop"}, {"yellow", "living room"}}

func findLivingThing() taskDef {
	n := len(creatures) * len(creatureSpots) * len(findBoxes)
	return taskDef{
		name:       "find-living-thing",
		summary:    "find a living thing somewhere in the house, focus on it and move it to a box",
		stepLimit:  30,
		variations: n,
		build: func(v int, h *house) *episode {
			d := digits(scramble(v, n), len(creatures), len(creatureSpots), len(findBoxes))
			c, sp, bx := creatures[d[0]], creatureSpots[d[1]], findBoxes[d[2]]
			w := h.w
			f := fPortable | fLiving | fAnimal
			if c.plant {
				f = fPortable | fLiving | fPlant
			}
			thing := h.put(&obj{base: c.name, flags: f}, sp)
			boxName := bx.color + " box"
			box := h.put(&obj{base: boxName, flags: fContainer | fBox}, spot{bx.room, ""})
			e := &episode{w: w,
				desc: fmt.Sprintf("Your task is to find a(n) living thing. First, focus on the thing. Then, move it to the %s in the %s.", boxName, bx.room),
			}
			e.focusOK = func(id int) bool { return w.objs[id].is(fLiving) }
			e.checks = []check{
				{10, func() bool { return slices.Contains(w.visible(), thing) }},
				{40, func() bool { return slices.Contains(w.focused, thing) }},
				{25, func() bool { return slices.Contains(w.focused, thing) && w.inInventory(thing) }},
			}
			e.complete = func() bool { return slices.Contains(w.focused, thing) && w.objs[thing].parent == box }
			e.gold = func(g *goldAgent) {
				g.reach(thing)
				g.do("focus on " + c.name)
				g.do("pick up " + c.name)
				g.goRoom(h.rooms[bx.room])
				g.do("move " + c.name + " to " + boxName)
			}
			return e
		},
	}
}

var bulbColors = []string{"red", "green", "blue", "yellow", "orange", "purple"}
var batterySpots = []spot{{"kitchen", "cupboard"}, {"living room", "chest"}, {"bedroom", "closet"}, {"art studio", "wooden cupboard"}, {"bathroom", "cabinet"}}
var wireSpots = []spot{{"workshop", "toolbox"}, {"living room", "couch"}, {"art studio", "desk"}, {"bedroom", "bed"}}
var wirePairs = [][2]string{{"black", "white"}, {"gray", "brown"}}

func lightBulb() taskDef {
	n := len(bulbColors) * len(batterySpots) * len(wireSpots) * len(wirePairs)
	return taskDef{
		name:       "light-bulb",
		summary:    "find a battery and two wires and build a circuit that lights a given bulb",
		stepLimit:  50,
		variations: n,
		build: func(v int, h *house) *episode {
			d := digits(scramble(v, n), len(bulbColors), len(batterySpots), len(wireSpots), len(wirePairs))
			color := bulbColors[d[0]]
			other := bulbColors[(d[0]+1)%len(bulbColors)]
			w := h.w
			bulbName := color + " light bulb"
			bulb := h.put(&obj{base: bulbName, flags: fPortable | fBulb}, spot{"workshop", "workbench"})
			h.put(&obj{base: other + " light bulb", flags: fPortable | fBulb}, spot{"workshop", "workbench"})
			battery := h.put(&obj{base: "battery", flags: fPortable | fBattery}, batterySpots[d[1]])
			pair := wirePairs[d[3]]
			w1 := h.put(&obj{base: pair[0] + " wire", flags: fPortable | fWire}, wireSpots[d[2]])
			w2 := h.put(&obj{base: pair[1] + " wire", flags: fPortable | fWire}, wireSpots[d[2]])
			e := &episode{w: w,
				desc: fmt.Sprintf("Your task is to turn on the %s by powering it using a battery and wires. First, focus on the %s. Then, create an electrical circuit that powers it on.", bulbName, bulbName),
			}
			e.focusOK = func(id int) bool { return id == bulb }
			near := func(id int) bool { return w.inInventory(id) || w.connected(id) }
			e.checks = []check{
				{20, func() bool { return slices.Contains(w.focused, bulb) }},
				{15, func() bool { return near(battery) }},
				{15, func() bool { return near(w1) && near(w2) }},
				{10, func() bool { return w.connected(bulb) }},
				{10, func() bool { return w.connected(battery) }},
			}
			e.complete = func() bool { return slices.Contains(w.focused, bulb) && w.objs[bulb].lit }
			e.gold = func(g *goldAgent) {
				g.goRoom(h.rooms["workshop"])
				g.do("focus on " + bulbName)
				g.fetch(battery)
				g.fetch(w1)
				g.fetch(w2)
				g.goRoom(h.rooms["workshop"])
				a, b := pair[0]+" wire", pair[1]+" wire"
				g.do("connect battery anode to " + a + " terminal 1")
				g.do("connect " + a + " terminal 2 to " + bulbName + " terminal 1")
				g.do("connect " + bulbName + " terminal 2 to " + b + " terminal 1")
				g.do("connect " + b + " terminal 2 to battery cathode")
			}
			return e
		},
	}
}

type substance struct {
	names      [3]string
	melt, boil float64
	temp       float64
	spots      []spot // nil: the shared spot list
}

var storeSpots = []spot{{"kitchen", "cupboard"}, {"living room", "chest"}, {"bedroom", "closet"}, {"workshop", "toolbox"}, {"art studio", "wooden cupboard"}}
var liquidSpots = []spot{{"kitchen", "table"}, {"kitchen", "cupboard"}, {"bathroom", "cabinet"}, {"living room", "chest"}, {"art studio", "desk"}}

var freezerOnly = []spot{{"kitchen", "freezer"}}

var meltables = []substance{
	{names: [3]string{"ice cube", "water", "steam"}, melt: 0, boil: 100, temp: -10, spots: freezerOnly},
	{names: [3]string{"chocolate", "liquid chocolate", "chocolate gas"}, melt: 30, boil: 300, temp: 20},
	{names: [3]string{"butter", "liquid butter", "butter gas"}, melt: 35, boil: 300, temp: 20},
	{names: [3]string{"soap", "liquid soap", "soap gas"}, melt: 50, boil: 300, temp: 20},
	{names: [3]string{"wax", "liquid wax", "wax gas"}, melt: 60, boil: 370, temp: 20},
	{names: [3]string{"caramel", "liquid caramel", "caramel gas"}, melt: 120, boil: 400, temp: 20},
	{names: [3]string{"tin", "liquid tin", "tin gas"}, melt: 232, boil: 2602, temp: 20},
	{names: [3]string{"lead", "liquid lead", "lead gas"}, melt: 327, boil: 1749, temp: 20},
}

var boilables = []substance{
	{names: [3]string{"ice cube", "water", "steam"}, melt: 0, boil: 100, temp: -10, spots: freezerOnly},
	{names: [3]string{"ice", "water", "steam"}, melt: 0, boil: 100, temp: 20, spots: liquidSpots},
	{names: [3]string{"frozen orange juice", "orange juice", "orange juice vapor"}, melt: -2, boil: 100, temp: 20, spots: liquidSpots},
	{names: [3]string{"frozen milk", "milk", "milk vapor"}, melt: -1, boil: 100, temp: 20, spots: liquidSpots},
	{names: [3]string{"solid ethanol", "ethanol", "ethanol vapor"}, melt: -114, boil: 78, temp: 20, spots: liquidSpots},
}

var freezables = []substance{
	{names: [3]string{"ice", "water", "steam"}, melt: 0, boil: 100, temp: 20, spots: liquidSpots},
	{names: [3]string{"frozen orange juice", "orange juice", "orange juice vapor"}, melt: -2, boil: 100, temp: 20, spots: liquidSpots},
	{names: [3]string{"frozen milk", "milk", "milk vapor"}, melt: -1, boil: 100, temp: 20, spots: liquidSpots},
	{names: [3]string{"frozen apple juice", "apple juice", "apple juice vapor"}, melt: -2, boil: 100, temp: 20, spots: liquidSpots},
	{names: [3]string{"solid olive oil", "olive oil", "olive oil vapor"}, melt: -6, boil: 300, temp: 20, spots: liquidSpots},
}

type subVariant struct {
	s  substance
	sp spot
}

func expand(subs []substance) []subVariant {
	var out []subVariant
	for _, s := range subs {
		sps := s.spots
		if sps == nil {
			sps = storeSpots
		}
		for _, sp := range sps {
			out = append(out, subVariant{s, sp})
		}
	}
	return out
}

// stateTask builds melt, boil and freeze: make a substance reach goal.
func stateTask(name, verb, summary string, subs []substance, goal matter, heldOut bool, limit int) taskDef {
	vars := expand(subs)
	n := len(vars)
	return taskDef{
		name: name, summary: summary, heldOut: heldOut, stepLimit: limit, variations: n,
		build: func(v int, h *house) *episode {
			sv := vars[scramble(v, n)]
			w := h.w
			s := &obj{names: sv.s.names, flags: fPortable | fSubstance, melt: sv.s.melt, boil: sv.s.boil, temp: sv.s.temp}
			id := h.put(s, sv.sp)
			start := s.st
			e := &episode{w: w,
				desc: fmt.Sprintf("Your task is to %s %s. First, focus on the substance. Then, take actions that will cause it to change its state of matter.", verb, s.names[start]),
			}
			e.focusOK = func(x int) bool { return x == id }
			in := func(f flag, active bool) bool {
				for p := s.parent; p >= 0; p = w.objs[p].parent {
					if w.objs[p].is(f) && (!active || w.objs[p].active) {
						return true
					}
				}
				return false
			}
			focused := func() bool { return slices.Contains(w.focused, id) }
			if goal == solid {
				e.checks = []check{
					{30, focused},
					{20, func() bool { return w.inInventory(id) }},
					{30, func() bool { return focused() && in(fCooler, false) && w.objs[w.objs[id].parent].setTemp < sv.s.melt }},
				}
			} else {
				e.checks = []check{
					{20, focused},
					{15, func() bool { return w.inInventory(id) }},
					{20, func() bool { return in(fHeater, false) }},
					{20, func() bool { return focused() && in(fHeater, true) }},
				}
			}
			e.complete = func() bool { return focused() && s.st == goal }
			e.gold = func(g *goldAgent) {
				g.reach(id)
				g.do("focus on " + s.name())
				g.do("pick up " + s.name())
				var dest int
				switch {
				case goal == solid:
					dest = w.objByName("freezer")
				case (goal == liquid && sv.s.melt < 200) || (goal == gas && sv.s.boil < 200):
					dest = w.objByName("stove")
				default:
					dest = w.objByName("blast furnace")
				}
				g.reach(dest)
				if w.objs[dest].is(fOpenable) && !w.objs[dest].open {
					g.do("open " + w.objs[dest].name())
				}
				g.do("move " + s.name() + " to " + w.objs[dest].name())
				if w.objs[dest].is(fActivatable) {
					g.do("activate " + w.objs[dest].name())
				}
				g.waitUntil(e.complete, 200)
			}
			return e
		},
	}
}

var gauged = []struct {
	name string
	temp float64
}{{"ice pop", -8}, {"bowl of soup", 70}, {"river stone", 12}, {"heat pack", 45}, {"snow globe", 20}, {"clay mug", 30}}
var thresholds = []float64{10, 25, 50}
var gaugedSpots = []spot{{"living room", "couch"}, {"bedroom", "bed"}, {"greenhouse", "shelf"}, {"art studio", "desk"}}
var thermometerSpots = []spot{{"kitchen", "cupboard"}, {"workshop", "toolbox"}, {"bathroom", "cabinet"}}
var gaugeBoxRooms = []string{"kitchen", "workshop"}

func useThermometer() taskDef {
	n := len(gauged) * len(thresholds) * len(gaugedSpots) * len(thermometerSpots) * len(gaugeBoxRooms)
	return taskDef{
		name:       "use-thermometer",
		summary:    "find a thermometer, measure an object's temperature and sort it into the right box",
		stepLimit:  40,
		variations: n,
		build: func(v int, h *house) *episode {
			d := digits(scramble(v, n), len(gauged), len(thresholds), len(gaugedSpots), len(thermometerSpots), len(gaugeBoxRooms))
			g0, thr, sp := gauged[d[0]], thresholds[d[1]], gaugedSpots[d[2]]
			boxRoom := gaugeBoxRooms[d[4]]
			w := h.w
			thing := h.put(&obj{base: g0.name, flags: fPortable, temp: g0.temp}, sp)
			thermo := h.put(&obj{base: "thermometer", flags: fPortable | fThermometer}, thermometerSpots[d[3]])
			red := h.put(&obj{base: "red box", flags: fContainer | fBox}, spot{boxRoom, ""})
			green := h.put(&obj{base: "green box", flags: fContainer | fBox}, spot{boxRoom, ""})
			right, wrong := red, green
			if g0.temp < thr {
				right, wrong = green, red
			}
			measured := false
			e := &episode{w: w,
				desc: fmt.Sprintf("Your task is to measure the temperature of the %s, which is located around the %s. First, focus on the thermometer. Next, focus on the %s. If the %s temperature is above %.1f degrees celsius, place it in the red box. If the %s temperature is below %.1f degrees celsius, place it in the green box. The boxes are located around the %s.",
					g0.name, sp.room, g0.name, g0.name, thr, g0.name, thr, boxRoom),
			}
			e.focusOK = func(id int) bool {
				switch id {
				case thermo:
					return true
				case thing:
					t := slices.Index(w.focused, thermo)
					return t >= 0 && t < slices.Index(w.focused, thing)
				}
				return false
			}
			e.checks = []check{
				{15, func() bool { return slices.Contains(w.focused, thermo) }},
				{10, func() bool { return w.inInventory(thermo) }},
				{15, func() bool { return slices.Contains(w.focused, thing) }},
				{20, func() bool { return measured }},
				{15, func() bool { return w.inInventory(thing) }},
			}
			e.complete = func() bool { return slices.Contains(w.focused, thing) && w.objs[thing].parent == right }
			e.failed = func() bool { return w.objs[thing].parent == wrong }
			e.gold = func(g *goldAgent) {
				g.fetch(thermo)
				g.do("focus on thermometer")
				g.reach(thing)
				g.do("focus on " + g0.name)
				g.do("use thermometer on " + g0.name)
				g.do("pick up " + g0.name)
				g.goRoom(h.rooms[boxRoom])
				g.do("move " + g0.name + " to " + w.objs[right].name())
			}
			// the scorer needs to see measurements of this object
			e.onEvent = func(ev event) {
				if ev.measured == thing && slices.Contains(w.focused, thing) {
					measured = true
				}
			}
			return e
		},
	}
}

// allTasks is the task list in display order.
var allTasks = []taskDef{
	findLivingThing(),
	lightBulb(),
	stateTask("melt", "melt", "melt a substance with a heat source found elsewhere", meltables, liquid, false, 40),
	useThermometer(),
	stateTask("boil", "boil", "boil a substance (held out: unseen in training)", boilables, gas, true, 40),
	stateTask("freeze", "freeze", "freeze a liquid (held out: unseen in training)", freezables, solid, true, 40),
}

func lookupTask(name string) (taskDef, bool) {
	for _, t := range allTasks {
		if t.name == name {
			return t, true
		}
	}
	return taskDef{}, false
}

// goldAgent plays a scripted plan on its own world and records the actions.
type goldAgent struct {
	w    *world
	ep   *episode
	acts []string
	err  error
}

func (g *goldAgent) do(a string) {
	if g.err != nil {
		return
	}
	obs, ev := g.w.act(a)
	g.ep.see(ev)
	g.acts = append(g.acts, a)
	if !ev.ok {
		g.err = fmt.Errorf("gold action %q was not understood: %s", a, obs)
	}
}

func (g *goldAgent) goRoom(r int) {
	for _, next := range g.w.path(g.w.room, r) {
		name := g.w.objs[next].base
		if d := g.w.doorBetween(g.w.room, next); !d.open {
			g.do("open door to " + name)
		}
		g.do("go to " + name)
	}
}

// reach goes to the room holding id and opens the closed containers around it.
func (g *goldAgent) reach(id int) {
	if !g.w.inInventory(id) {
		g.goRoom(g.w.roomOf(id))
	}
	var shut []int
	for p := g.w.objs[id].parent; p >= 0 && !g.w.objs[p].is(fRoom); p = g.w.objs[p].parent {
		if o := g.w.objs[p]; o.is(fOpenable) && !o.open {
			shut = append(shut, p)
		}
	}
	for i := len(shut) - 1; i >= 0; i-- {
		g.do("open " + g.w.objs[shut[i]].name())
	}
}

func (g *goldAgent) fetch(id int) {
	if g.w.inInventory(id) {
		return
	}
	g.reach(id)
	g.do("pick up " + g.w.objs[id].name())
}

func (g *goldAgent) waitUntil(cond func() bool, max int) {
	for i := 0; i < max && !cond() && g.err == nil; i++ {
		g.do("wait1")
	}
}
