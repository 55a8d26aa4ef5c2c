package textlab

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// flag marks what an object is and what can be done with it.
type flag uint32

const (
	fRoom        flag = 1 << iota
	fPortable         // can be picked up and moved
	fContainer        // things can be put in it
	fSurface          // a container whose contents are "on" it
	fOpenable         // has a door or lid
	fActivatable      // can be switched on and off
	fHeater           // heats its contents while active
	fCooler           // cools its contents (always on)
	fLiving
	fAnimal
	fPlant
	fSubstance // has a state of matter that follows its temperature
	fBox
	fThermometer
	fBattery
	fWire
	fBulb
)

type matter uint8

const (
	solid matter = iota
	liquid
	gas
)

func (m matter) String() string { return [...]string{"solid", "liquid", "gas"}[m] }

// obj is anything in the world: rooms, furniture, items and the inventory.
type obj struct {
	id       int
	base     string    // name (non-substances)
	names    [3]string // substance name per state of matter
	flags    flag
	parent   int // -1: none
	children []int
	open     bool
	active   bool
	temp     float64 // °C
	setTemp  float64 // heater/cooler target temperature
	rate     float64 // heater/cooler °C per tick
	melt     float64 // substance melting point
	boil     float64 // substance boiling point
	st       matter
	lit      bool // light bulb
}

func (o *obj) is(f flag) bool { return o.flags&f != 0 }

func (o *obj) name() string {
	if o.is(fSubstance) {
		return o.names[o.st]
	}
	return o.base
}

// terminal is one of the two electrical terminals of a component.
type terminal struct {
	obj, idx int
}

type door struct {
	a, b int // room ids
	open bool
}

// world is one episode's state. It is not safe for concurrent use.
type world struct {
	objs      []*obj
	doors     []*door
	room      int // agent's room
	inv       int // inventory container id
	edges     [][2]terminal
	focused   []int
	teleport  bool
	ticks     int
	scratchVS []int // reused by visible()
}

func newWorld() *world {
	w := &world{}
	inv := w.add(&obj{base: "inventory", flags: fContainer, open: true}, -1)
	w.inv = inv
	return w
}

// add places o inside parent (-1 for none) and returns its id.
func (w *world) add(o *obj, parent int) int {
	o.id = len(w.objs)
	o.parent = -1
	w.objs = append(w.objs, o)
	if parent >= 0 {
		w.place(o.id, parent)
	}
	if o.is(fSubstance) {
		o.st = stateAt(o.temp, o.melt, o.boil)
	}
	return o.id
}

func (w *world) addRoom(name string) int {
	return w.add(&obj{base: name, flags: fRoom | fContainer, open: true}, -1)
}

func (w *world) connectRooms(a, b int) {
	w.doors = append(w.doors, &door{a: a, b: b})
}

func (w *world) place(id, parent int) {
	o := w.objs[id]
	if o.parent >= 0 {
		p := w.objs[o.parent]
		if i := slices.Index(p.children, id); i >= 0 {
			p.children = slices.Delete(p.children, i, i+1)
		}
	}
	o.parent = parent
	w.objs[parent].children = append(w.objs[parent].children, id)
}

func (w *world) roomByName(name string) int {
	for _, o := range w.objs {
		if o.is(fRoom) && o.base == name {
			return o.id
		}
	}
	return -1
}

func (w *world) objByName(name string) int {
	for _, o := range w.objs {
		if !o.is(fRoom) && o.name() == name {
			return o.id
		}
	}
	return -1
}

// roomOf is the room an object is in (the inventory counts as the agent's room).
func (w *world) roomOf(id int) int {
	for id >= 0 {
		o := w.objs[id]
		if o.is(fRoom) {
			return id
		}
		if id == w.inv {
			return w.room
		}
		id = o.parent
	}
	return -1
}

// inside reports whether id is (transitively) inside anc.
func (w *world) inside(id, anc int) bool {
	for p := w.objs[id].parent; p >= 0; p = w.objs[p].parent {
		if p == anc {
			return true
		}
	}
	return false
}

func (w *world) inInventory(id int) bool { return w.inside(id, w.inv) }

func (w *world) seeInto(o *obj) bool {
	return o.is(fContainer) && (!o.is(fOpenable) || o.open)
}

// visible lists what the agent can see and reach: the room's contents
// through open containers, then the inventory's.
func (w *world) visible() []int {
	out := w.scratchVS[:0]
	var walk func(id int)
	walk = func(id int) {
		for _, c := range w.objs[id].children {
			out = append(out, c)
			if w.seeInto(w.objs[c]) {
				walk(c)
			}
		}
	}
	walk(w.room)
	walk(w.inv)
	w.scratchVS = out
	return out
}

func (w *world) doorsOf(room int) []*door {
	var out []*door
	for _, d := range w.doors {
		if d.a == room || d.b == room {
			out = append(out, d)
		}
	}
	return out
}

func (d *door) other(room int) int {
	if d.a == room {
		return d.b
	}
	return d.a
}

func (w *world) doorBetween(a, b int) *door {
	for _, d := range w.doors {
		if (d.a == a && d.b == b) || (d.a == b && d.b == a) {
			return d
		}
	}
	return nil
}

// path is the shortest list of rooms from a to b (excluding a), by BFS.
func (w *world) path(a, b int) []int {
	prev := map[int]int{a: -1}
	queue := []int{a}
	for len(queue) > 0 {
		r := queue[0]
		queue = queue[1:]
		if r == b {
			break
		}
		for _, d := range w.doorsOf(r) {
			n := d.other(r)
			if _, seen := prev[n]; !seen {
				prev[n] = r
				queue = append(queue, n)
			}
		}
	}
	if _, ok := prev[b]; !ok {
		return nil
	}
	var out []int
	for r := b; r != a; r = prev[r] {
		out = append(out, r)
	}
	slices.Reverse(out)
	return out
}

func stateAt(t, melt, boil float64) matter {
	switch {
	case t >= boil:
		return gas
	case t >= melt:
		return liquid
	}
	return solid
}

// tick advances time: heaters and coolers move their contents' temperature
// towards their own; substances change state; bulbs follow the circuit.
func (w *world) tick() {
	w.ticks++
	for _, o := range w.objs {
		if !o.is(fSubstance) {
			continue
		}
		for p := o.parent; p >= 0; p = w.objs[p].parent {
			src := w.objs[p]
			if (src.is(fHeater) && src.active) || src.is(fCooler) {
				d := src.setTemp - o.temp
				o.temp += math.Copysign(math.Min(math.Abs(d), src.rate), d)
				break
			}
		}
		o.st = stateAt(o.temp, o.melt, o.boil)
	}
	w.updateCircuit()
}

func termName(o *obj, idx int) string {
	if o.is(fBattery) {
		return o.base + [2]string{" anode", " cathode"}[idx]
	}
	return o.base + " terminal " + strconv.Itoa(idx+1)
}

func isElectrical(o *obj) bool { return o.is(fBattery | fWire | fBulb) }

// updateCircuit lights every bulb whose two terminals are joined, through
// wires, to the two different poles of a battery.
func (w *world) updateCircuit() {
	parent := map[terminal]terminal{}
	var find func(t terminal) terminal
	find = func(t terminal) terminal {
		p, ok := parent[t]
		if !ok || p == t {
			return t
		}
		r := find(p)
		parent[t] = r
		return r
	}
	union := func(a, b terminal) { parent[find(a)] = find(b) }
	for _, e := range w.edges {
		union(e[0], e[1])
	}
	for _, o := range w.objs {
		if o.is(fWire) {
			union(terminal{o.id, 0}, terminal{o.id, 1})
		}
	}
	for _, b := range w.objs {
		if !b.is(fBulb) {
			continue
		}
		b.lit = false
		b0, b1 := find(terminal{b.id, 0}), find(terminal{b.id, 1})
		for _, bat := range w.objs {
			if !bat.is(fBattery) {
				continue
			}
			an, ca := find(terminal{bat.id, 0}), find(terminal{bat.id, 1})
			if an != ca && ((b0 == an && b1 == ca) || (b0 == ca && b1 == an)) {
				b.lit = true
			}
		}
	}
}

func (w *world) connected(id int) bool {
	for _, e := range w.edges {
		if e[0].obj == id || e[1].obj == id {
			return true
		}
	}
	return false
}

// ---- text ----

func article(name string) string {
	if name != "" && strings.ContainsRune("aeiou", rune(name[0])) {
		return "an " + name
	}
	return "a " + name
}

func (w *world) short(id int) string {
	o := w.objs[id]
	if o.is(fSubstance) {
		return "a substance called " + o.name()
	}
	return article(o.name())
}

func listing(parts []string) string {
	switch len(parts) {
	case 0:
		return "nothing"
	case 1:
		return parts[0]
	}
	return strings.Join(parts[:len(parts)-1], ", ") + ", and " + parts[len(parts)-1]
}

func (w *world) contents(id int) string {
	o := w.objs[id]
	parts := make([]string, 0, len(o.children))
	for _, c := range o.children {
		parts = append(parts, w.short(c))
	}
	return listing(parts)
}

// describe renders an object the way a room listing shows it.
func (w *world) describe(id int) string {
	o := w.objs[id]
	var b strings.Builder
	b.WriteString(w.short(id))
	switch {
	case o.is(fBulb):
		if o.lit {
			b.WriteString(", which is on")
		} else {
			b.WriteString(", which is off")
		}
	case o.is(fActivatable):
		if o.active {
			b.WriteString(", which is turned on")
		} else {
			b.WriteString(", which is turned off")
		}
	}
	if o.is(fContainer) {
		switch {
		case o.is(fOpenable):
			state := "closed"
			if o.open {
				state = "open"
			}
			fmt.Fprintf(&b, ". The %s door is %s", o.name(), state)
			if o.open {
				fmt.Fprintf(&b, ". In the %s is: %s", o.name(), w.contents(id))
			}
			b.WriteString(".")
		case o.is(fSurface):
			fmt.Fprintf(&b, ". On the %s is: %s.", o.name(), w.contents(id))
		default:
			fmt.Fprintf(&b, " (containing %s)", w.contents(id))
		}
	}
	return b.String()
}

func (w *world) look() string {
	r := w.objs[w.room]
	var b strings.Builder
	fmt.Fprintf(&b, "This room is called the %s. In it, you see: \n\tthe agent\n\ta substance called air\n", r.base)
	for _, c := range r.children {
		b.WriteString("\t")
		b.WriteString(w.describe(c))
		b.WriteString("\n")
	}
	b.WriteString("You also see:\n")
	for _, d := range w.doorsOf(w.room) {
		state := "closed"
		if d.open {
			state = "open"
		}
		fmt.Fprintf(&b, "\tA door to the %s (that is %s)\n", w.objs[d.other(w.room)].base, state)
	}
	return b.String()
}

func (w *world) inventory() string {
	var b strings.Builder
	b.WriteString("In your inventory, you see:\n")
	inv := w.objs[w.inv]
	if len(inv.children) == 0 {
		b.WriteString("\tnothing\n")
	}
	for _, c := range inv.children {
		b.WriteString("\t")
		b.WriteString(w.describe(c))
		b.WriteString("\n")
	}
	return b.String()
}
