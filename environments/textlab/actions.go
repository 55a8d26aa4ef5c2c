package textlab

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

const msgUnknown = "No known action matches that input."

// UnknownAction is the observation of an action no command matches (as
// ScienceWorld's): what a malformed answer gets.
const UnknownAction = msgUnknown

// event is what an action did that a task's scorer may care about.
type event struct {
	ok       bool // the action was understood and carried out (time passes)
	focus    int  // object focused on, or -1
	measured int  // object measured with the thermometer, or -1
}

// normalize lower-cases and collapses white space.
func normalize(s string) string {
	return strings.Join(strings.Fields(strings.ToLower(s)), " ")
}

func stripThe(s string) string { return strings.TrimPrefix(s, "the ") }

func (w *world) resolve(ref string) (int, bool) {
	ref = stripThe(ref)
	for _, id := range w.visible() {
		if w.objs[id].name() == ref {
			return id, true
		}
	}
	return -1, false
}

func (w *world) resolveTerminal(ref string) (terminal, bool) {
	ref = stripThe(ref)
	for _, id := range w.visible() {
		o := w.objs[id]
		if !isElectrical(o) || !strings.HasPrefix(ref, o.base) {
			continue
		}
		for i := range 2 {
			if termName(o, i) == ref {
				return terminal{id, i}, true
			}
		}
	}
	return terminal{}, false
}

func (w *world) resolveDoor(ref string) (*door, bool) {
	ref = stripThe(ref)
	var target string
	switch {
	case strings.HasPrefix(ref, "door to "):
		target = stripThe(strings.TrimPrefix(ref, "door to "))
	case strings.HasSuffix(ref, " door"):
		target = strings.TrimSuffix(ref, " door")
	default:
		return nil, false
	}
	for _, d := range w.doorsOf(w.room) {
		if w.objs[d.other(w.room)].base == target {
			return d, true
		}
	}
	return nil, false
}

// split2 splits s at one of the occurrences of sep so that both halves
// satisfy ok, trying left to right.
func split2(s, sep string, ok func(a, b string) bool) (string, string, bool) {
	for i := 0; ; {
		j := strings.Index(s[i:], sep)
		if j < 0 {
			return "", "", false
		}
		a, b := s[:i+j], s[i+j+len(sep):]
		if ok(a, b) {
			return a, b, true
		}
		i += j + 1
	}
}

func cutAny(s string, prefixes ...string) (string, bool) {
	for _, p := range prefixes {
		if rest, ok := strings.CutPrefix(s, p); ok {
			return rest, true
		}
	}
	return "", false
}

// act carries out one action and returns the observation.
func (w *world) act(input string) (string, event) {
	ev := event{focus: -1, measured: -1}
	s := normalize(input)
	obs, ok := w.dispatch(s, &ev)
	if !ok {
		return msgUnknown, ev
	}
	ev.ok = true
	n := 1
	switch s {
	case "wait", "wait10":
		n = 10
	}
	for range n {
		w.tick()
	}
	return obs, ev
}

func (w *world) dispatch(s string, ev *event) (string, bool) {
	switch s {
	case "look around", "look":
		return w.look(), true
	case "inventory", "look at inventory":
		return w.inventory(), true
	case "wait", "wait10":
		return "You decide to wait for 10 iterations.", true
	case "wait1", "wait 1":
		return "You decide to wait for 1 iterations.", true
	}
	if rest, ok := cutAny(s, "go to ", "go "); ok {
		return w.goTo(stripThe(rest))
	}
	if rest, ok := strings.CutPrefix(s, "teleport to "); ok && w.teleport {
		r := w.roomByName(stripThe(rest))
		if r < 0 {
			return "", false
		}
		w.room = r
		return "You teleport to the " + w.objs[r].base + ".", true
	}
	if rest, ok := strings.CutPrefix(s, "open "); ok {
		return w.setOpen(rest, true)
	}
	if rest, ok := strings.CutPrefix(s, "close "); ok {
		return w.setOpen(rest, false)
	}
	if rest, ok := cutAny(s, "pick up ", "take "); ok {
		id, found := w.resolve(rest)
		if !found {
			return "", false
		}
		return w.pickUp(id), true
	}
	if rest, ok := cutAny(s, "put down ", "drop "); ok {
		id, found := w.resolve(rest)
		if !found {
			return "", false
		}
		if !w.inInventory(id) {
			return "The " + w.objs[id].name() + " is not in your inventory.", true
		}
		w.place(id, w.room)
		return fmt.Sprintf("You move the %s to the %s.", w.objs[id].name(), w.objs[w.room].base), true
	}
	if rest, ok := strings.CutPrefix(s, "move "); ok {
		return w.moveTo(rest, " to ")
	}
	if rest, ok := strings.CutPrefix(s, "put "); ok {
		if obs, ok := w.moveTo(rest, " in "); ok {
			return obs, true
		}
		return w.moveTo(rest, " on ")
	}
	if rest, ok := strings.CutPrefix(s, "connect "); ok {
		var ta, tb terminal
		_, _, found := split2(rest, " to ", func(a, b string) bool {
			var ok1, ok2 bool
			ta, ok1 = w.resolveTerminal(a)
			tb, ok2 = w.resolveTerminal(b)
			return ok1 && ok2
		})
		if !found {
			return "", false
		}
		return w.connect(ta, tb), true
	}
	if rest, ok := strings.CutPrefix(s, "disconnect "); ok {
		id, found := w.resolve(rest)
		if !found {
			return "", false
		}
		n := len(w.edges)
		w.edges = slices.DeleteFunc(w.edges, func(e [2]terminal) bool { return e[0].obj == id || e[1].obj == id })
		if n == len(w.edges) {
			return "The " + w.objs[id].name() + " is not connected to anything.", true
		}
		w.updateCircuit()
		return "The " + w.objs[id].name() + " is now disconnected.", true
	}
	if rest, ok := cutAny(s, "activate ", "turn on "); ok {
		return w.setActive(rest, true)
	}
	if rest, ok := cutAny(s, "deactivate ", "turn off "); ok {
		return w.setActive(rest, false)
	}
	if rest, ok := strings.CutPrefix(s, "focus on "); ok {
		id, found := w.resolve(rest)
		if !found {
			return "", false
		}
		ev.focus = id
		if !slices.Contains(w.focused, id) {
			w.focused = append(w.focused, id)
		}
		return "You focus on the " + w.objs[id].name() + ".", true
	}
	if rest, ok := cutAny(s, "look at ", "look in ", "examine "); ok {
		id, found := w.resolve(rest)
		if !found {
			return "", false
		}
		return w.lookAt(id), true
	}
	if rest, ok := strings.CutPrefix(s, "use "); ok {
		var tool, target int
		_, _, found := split2(rest, " on ", func(a, b string) bool {
			var ok1, ok2 bool
			tool, ok1 = w.resolve(a)
			target, ok2 = w.resolve(b)
			return ok1 && ok2
		})
		if !found {
			return "", false
		}
		if !w.objs[tool].is(fThermometer) {
			return "It's not clear how to use the " + w.objs[tool].name() + " on that.", true
		}
		ev.measured = target
		return fmt.Sprintf("the thermometer measures a temperature of %d degrees celsius", int(math.Round(w.objs[target].temp))), true
	}
	if s == "task" {
		return "", false // answered by the environment, which knows the task
	}
	return "", false
}

func (w *world) goTo(name string) (string, bool) {
	r := w.roomByName(name)
	if r < 0 {
		return "", false
	}
	if r == w.room {
		return "You are already in the " + name + ".", true
	}
	d := w.doorBetween(w.room, r)
	if d == nil {
		return "It's not clear how to get there from here.", true
	}
	if !d.open {
		return "The door is not open.", true
	}
	w.room = r
	return "You move to the " + name + ".", true
}

func (w *world) setOpen(ref string, open bool) (string, bool) {
	verb := map[bool]string{true: "open", false: "closed"}[open]
	if d, ok := w.resolveDoor(ref); ok {
		if d.open == open {
			return "The door is already " + verb + ".", true
		}
		d.open = open
		return "The door is now " + verb + ".", true
	}
	id, ok := w.resolve(ref)
	if !ok {
		return "", false
	}
	o := w.objs[id]
	if !o.is(fOpenable) {
		return "The " + o.name() + " can't be " + map[bool]string{true: "opened", false: "closed"}[open] + ".", true
	}
	if o.open == open {
		return "The " + o.name() + " is already " + verb + ".", true
	}
	o.open = open
	return "The " + o.name() + " is now " + verb + ".", true
}

func (w *world) pickUp(id int) string {
	o := w.objs[id]
	if !o.is(fPortable) {
		return "The " + o.name() + " can't be picked up."
	}
	if o.parent == w.inv {
		return "The " + o.name() + " is already in your inventory."
	}
	w.place(id, w.inv)
	return "You move the " + o.name() + " to the inventory."
}

func (w *world) moveTo(rest, sep string) (string, bool) {
	var x, y int
	_, _, found := split2(rest, sep, func(a, b string) bool {
		var ok1, ok2 bool
		x, ok1 = w.resolve(a)
		y, ok2 = w.resolve(b)
		if !ok2 && stripThe(b) == "inventory" {
			y, ok2 = w.inv, true
		}
		return ok1 && ok2
	})
	if !found {
		return "", false
	}
	ox, oy := w.objs[x], w.objs[y]
	switch {
	case !ox.is(fPortable):
		return "The " + ox.name() + " can't be moved.", true
	case x == y || w.inside(y, x):
		return "You can't move something into itself.", true
	case !oy.is(fContainer):
		return "The " + oy.name() + " can't hold things.", true
	case !w.seeInto(oy):
		return "The " + oy.name() + " is closed.", true
	case ox.parent == y:
		return "The " + ox.name() + " is already there.", true
	}
	w.place(x, y)
	return fmt.Sprintf("You move the %s to the %s.", ox.name(), oy.name()), true
}

func (w *world) connect(a, b terminal) string {
	if a == b || a.obj == b.obj {
		return "You can't connect a component to itself."
	}
	for _, e := range w.edges {
		if (e[0] == a && e[1] == b) || (e[0] == b && e[1] == a) {
			return "Those are already connected."
		}
	}
	w.edges = append(w.edges, [2]terminal{a, b})
	w.updateCircuit()
	return fmt.Sprintf("The %s is now connected to the %s.", termName(w.objs[a.obj], a.idx), termName(w.objs[b.obj], b.idx))
}

func (w *world) setActive(ref string, on bool) (string, bool) {
	id, ok := w.resolve(ref)
	if !ok {
		return "", false
	}
	o := w.objs[id]
	verb := map[bool]string{true: "activated", false: "deactivated"}[on]
	if !o.is(fActivatable) {
		return "It's not clear how to " + strings.TrimSuffix(verb, "d") + " the " + o.name() + ".", true
	}
	if o.active == on {
		return "The " + o.name() + " is already " + verb + ".", true
	}
	o.active = on
	return "The " + o.name() + " is now " + verb + ".", true
}

func (w *world) lookAt(id int) string {
	o := w.objs[id]
	switch {
	case o.is(fThermometer):
		return "a thermometer, currently reading a temperature of 20 degrees celsius"
	case isElectrical(o):
		var conns []string
		for _, e := range w.edges {
			for k := range 2 {
				if e[k].obj == id {
					conns = append(conns, termName(o, e[k].idx)+" is connected to the "+termName(w.objs[e[1-k].obj], e[1-k].idx))
				}
			}
		}
		d := w.describe(id)
		if len(conns) == 0 {
			return d + ". Its terminals are not connected."
		}
		return d + ". Its " + strings.Join(conns, "; its ") + "."
	case o.is(fContainer) && w.seeInto(o) && !o.is(fOpenable) && !o.is(fSurface):
		return fmt.Sprintf("a %s. In the %s is: %s.", o.name(), o.name(), w.contents(id))
	}
	return w.describe(id)
}

// validActions lists the actions that make sense in the current state,
// sorted, in the style of ScienceWorld's valid action-object combinations.
func (w *world) validActions() []string {
	out := []string{"look around", "inventory", "wait", "wait1"}
	for _, d := range w.doorsOf(w.room) {
		to := w.objs[d.other(w.room)].base
		if d.open {
			out = append(out, "go to "+to, "close door to "+to)
		} else {
			out = append(out, "open door to "+to)
		}
	}
	if w.teleport {
		for _, o := range w.objs {
			if o.is(fRoom) && o.id != w.room {
				out = append(out, "teleport to "+o.base)
			}
		}
	}
	vis := slices.Clone(w.visible())
	var holders, terms []string
	hasThermo := false
	for _, id := range vis {
		o := w.objs[id]
		if o.is(fContainer) && w.seeInto(o) {
			holders = append(holders, o.name())
		}
		if o.is(fThermometer) {
			hasThermo = true
		}
		if isElectrical(o) {
			terms = append(terms, termName(o, 0), termName(o, 1))
		}
	}
	for _, id := range vis {
		o := w.objs[id]
		n := o.name()
		out = append(out, "look at "+n, "focus on "+n)
		if o.is(fOpenable) {
			if o.open {
				out = append(out, "close "+n)
			} else {
				out = append(out, "open "+n)
			}
		}
		if o.is(fActivatable) {
			if o.active {
				out = append(out, "deactivate "+n)
			} else {
				out = append(out, "activate "+n)
			}
		}
		if o.is(fPortable) {
			if w.inInventory(id) {
				out = append(out, "put down "+n)
			} else {
				out = append(out, "pick up "+n)
			}
			for _, h := range holders {
				hid, _ := w.resolve(h)
				if hid != id && hid != o.parent && !w.inside(hid, id) {
					out = append(out, "move "+n+" to "+h)
				}
			}
		}
		if hasThermo {
			out = append(out, "use thermometer on "+n)
		}
		if len(w.edges) > 0 && isElectrical(o) && w.connected(id) {
			out = append(out, "disconnect "+n)
		}
	}
	for i := range terms {
		for j := range terms {
			if !sameComponent(terms[i], terms[j]) {
				out = append(out, "connect "+terms[i]+" to "+terms[j])
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

func sameComponent(a, b string) bool {
	cut := func(s string) string {
		for _, suf := range []string{" anode", " cathode", " terminal 1", " terminal 2"} {
			if t, ok := strings.CutSuffix(s, suf); ok {
				return t
			}
		}
		return s
	}
	return cut(a) == cut(b)
}
