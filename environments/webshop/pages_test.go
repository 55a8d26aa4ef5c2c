package webshop

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/empo2/empo2/environments"
)

const instr = "Find me long lasting lipstick with color: nude, and size: large, and price lower than 50.00 dollars"

// TestObservationSnapshots walks every page of the tiny shop and compares the
// text observations with golden strings.
func TestObservationSnapshots(t *testing.T) {
	o := envOpts(tinyShop(t))
	o.Extra = map[string]string{"reviews": "keep"} // the reviews file's rating and review
	e, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	v := goalIndex(t, e, map[string]string{"color": "nude", "size": "large"})
	rr, err := e.Reset(bg, "webshop", v, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rr.TaskDescription != instr {
		t.Fatalf("task description %q", rr.TaskDescription)
	}
	want := "WebShop [SEP] Instruction: [SEP] " + instr + " [SEP] Search"
	if rr.Observation != want {
		t.Fatalf("search page:\n got %q\nwant %q", rr.Observation, want)
	}
	head := "Instruction: [SEP] " + instr + " [SEP] Back to Search [SEP] "
	fillers := func(lo, hi int) string {
		var parts []string
		for i := lo; i < hi; i++ {
			parts = append(parts, "B0000001"+twoDigits(i), "Filler Lipstick Number "+itoa(i)+" in a Tube", "$100.0")
		}
		return strings.Join(parts, " [SEP] ")
	}
	item := head + "< Prev [SEP] color [SEP] ruby | red [SEP] nude [SEP] size [SEP] small [SEP] large [SEP] Acme Red Lipstick [SEP] Price: $12.5 [SEP] Rating: 4.5 [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now"
	steps := []struct{ action, obs string }{
		{"search[Red Lipstick]", head + "Page 1 (Total results: 13) [SEP] Next > [SEP] B000000001 [SEP] Acme Red Lipstick [SEP] $12.5 [SEP] " + fillers(0, 9)},
		{"click[next >]", head + "Page 2 (Total results: 13) [SEP] < Prev [SEP] Next > [SEP] " + fillers(9, 12)},
		{"click[< prev]", head + "Page 1 (Total results: 13) [SEP] Next > [SEP] B000000001 [SEP] Acme Red Lipstick [SEP] $12.5 [SEP] " + fillers(0, 9)},
		{"click[B000000001]", item},
		{"click[nude]", item},
		{"click[large]", item},
		{"click[description]", head + "< Prev [SEP] A long lasting lipstick for every day."},
		{"click[< prev]", item},
		{"click[features]", head + "< Prev [SEP] Long lasting color [SEP] Cruelty free formula"},
		{"click[< prev]", item},
		{"click[reviews]", head + `< Prev [SEP] "Nice" [SEP] 5 [SEP] Great color`},
		{"click[< prev]", item},
		{"click[buy now]", `Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] 1.0 [SEP] Purchased [SEP] asin [SEP] B000000001 [SEP] options [SEP] {"color":"nude","size":"large"}`},
	}
	for i, s := range steps {
		r := mustStep(t, e, s.action)
		if r.Observation != s.obs {
			t.Fatalf("step %d %s:\n got %q\nwant %q", i, s.action, r.Observation, s.obs)
		}
		if r.Info["valid"] != true {
			t.Fatalf("step %d %s not valid", i, s.action)
		}
		last := i == len(steps)-1
		if r.Done != last {
			t.Fatalf("step %d: done=%v", i, r.Done)
		}
		if last && (r.Reward != 100 || e.Score() != 100 || r.Info["won"] != true || r.Info["raw_reward"] != 1.0 ||
			r.Info["r_type"] != 1.0 || r.Info["r_att"] != 1.0 || r.Info["r_option"] != 1.0 || r.Info["r_price"] != true) {
			t.Fatalf("purchase: reward %v score %v info %v", r.Reward, e.Score(), r.Info)
		}
		if !last && r.Reward != 0 {
			t.Fatalf("step %d: reward %v before the purchase", i, r.Reward)
		}
	}
	if _, err := e.Step(bg, "click[back to search]"); !errors.Is(err, environments.ErrEpisodeDone) {
		t.Fatalf("step after the purchase: %v", err)
	}
}

func twoDigits(i int) string { return string(rune('0'+i/10)) + string(rune('0'+i%10)) }
func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return twoDigits(i)
}

func TestValidActionsPerPage(t *testing.T) {
	e, err := New(envOpts(tinyShop(t)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.ValidActions(bg); !errors.Is(err, environments.ErrNotReset) {
		t.Fatalf("ValidActions before Reset: %v", err)
	}
	if _, err := e.Reset(bg, "webshop", 0, 0); err != nil {
		t.Fatal(err)
	}
	check := func(want ...string) {
		t.Helper()
		got, err := e.ValidActions(bg)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("valid actions %v (%v), want %v", got, err, want)
		}
	}
	check("search[<query>]")
	mustStep(t, e, "search[shampoo]")
	check("click[back to search]", "click[next >]", "click[b000000002]")
	mustStep(t, e, "click[b000000002]")
	check("click[back to search]", "click[< prev]", "click[description]", "click[features]", "click[reviews]", "click[buy now]")
	mustStep(t, e, "click[reviews]")
	check("click[back to search]", "click[< prev]")
	mustStep(t, e, "click[back to search]")
	check("search[<query>]")
}

func TestInvalidActions(t *testing.T) {
	o := envOpts(tinyShop(t))
	o.StepLimit = 100
	e, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Step(bg, "search[x]"); !errors.Is(err, environments.ErrNotReset) {
		t.Fatalf("Step before Reset: %v", err)
	}
	rr, err := e.Reset(bg, "webshop", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	obs := rr.Observation
	for _, a := range []string{"", "search", "search[]", "click[b000000001]", "click[next >]", "buy[it]", "look around", "Search[lipstick]", " search[lipstick]"} {
		r := mustStep(t, e, a)
		if r.Observation != obs || r.Reward != 0 || r.Done || r.Info["valid"] != false {
			t.Fatalf("invalid action %q on the search page: %+v", a, r)
		}
	}
	obs = mustStep(t, e, "search[lipstick]").Observation
	for _, a := range []string{"click[< prev]", "click[b000000002]", "click[buy now]", "click[search]", "click[nude]", "click[description]", "click[]", "click[next]"} {
		r := mustStep(t, e, a)
		if r.Observation != obs || r.Reward != 0 || r.Done || r.Info["valid"] != false {
			t.Fatalf("invalid action %q on the results page: %+v", a, r)
		}
	}
	// The argument's case does not matter (the original lower-cases it);
	// blanks around it do.
	if r := mustStep(t, e, "  click[ NEXT > ] "); r.Info["valid"] != false {
		t.Fatalf("  click[ NEXT > ] : %+v", r)
	}
	if r := mustStep(t, e, "click[NEXT >]"); r.Info["valid"] != true || !strings.Contains(r.Observation, "Page 2 (Total results: 13)") {
		t.Fatalf("click[NEXT >]: %+v", r)
	}
	if e.steps != 20 {
		t.Fatalf("steps = %d, want 20 (invalid actions count as steps)", e.steps)
	}
	// A search runs from any page, as in the original's step(): here from an
	// item page; the chosen options are forgotten.
	mustStep(t, e, "click[< prev]")
	mustStep(t, e, "click[b000000001]")
	mustStep(t, e, "click[nude]")
	r := mustStep(t, e, "search[shampoo]")
	if r.Info["valid"] != true || !strings.Contains(r.Observation, "Page 1 (Total results: 1) [SEP] Next > [SEP] B000000002 [SEP] Acme Blue Shampoo") || len(e.options) != 0 {
		t.Fatalf("search from an item page: %+v (options %v)", r, e.options)
	}
	// A search with action correction on is never turned into a click.
	e.correct = true
	mustStep(t, e, "click[b000000002]")
	if r := mustStep(t, e, "search[lipstick]"); r.Info["valid"] != true || r.Info["corrected_from"] != nil || !strings.Contains(r.Observation, "Total results: 13") {
		t.Fatalf("search with correction: %+v", r)
	}
}

func TestStepLimit(t *testing.T) {
	o := envOpts(tinyShop(t))
	o.StepLimit = 4
	e, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Reset(bg, "webshop", 0, 0); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 4; i++ {
		r := mustStep(t, e, "click[nothing]")
		if r.Done != (i == 4) {
			t.Fatalf("step %d: done=%v", i, r.Done)
		}
		if i == 4 && (r.Info["truncated"] != true || r.Info["won"] != false) {
			t.Fatalf("last step info %v", r.Info)
		}
	}
	if _, err := e.Step(bg, "search[x]"); !errors.Is(err, environments.ErrEpisodeDone) {
		t.Fatalf("step past the limit: %v", err)
	}
	// The default limit is 15.
	e2, err := New(envOpts(tinyShop(t)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e2.Reset(bg, "webshop", 0, 0); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= DefaultStepLimit; i++ {
		if r := mustStep(t, e2, "noop"); r.Done != (i == DefaultStepLimit) {
			t.Fatalf("default limit: step %d done=%v", i, r.Done)
		}
	}
}

func TestPaging(t *testing.T) {
	e, err := New(envOpts(""))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Reset(bg, "webshop", 3, 0); err != nil {
		t.Fatal(err)
	}
	r := mustStep(t, e, "search[lightweight running shoes for women]")
	if !strings.Contains(r.Observation, "Page 1 (Total results: 50) [SEP] Next > [SEP] ") || strings.Contains(r.Observation, "< Prev") {
		t.Fatalf("page 1: %s", r.Observation)
	}
	page1 := r.Observation
	seen := map[string]bool{}
	for p := 2; p <= 5; p++ {
		r = mustStep(t, e, "click[next >]")
		if !strings.Contains(r.Observation, "Page "+itoa(p)+" (Total results: 50) [SEP] < Prev") {
			t.Fatalf("page %d: %s", p, r.Observation)
		}
		if !strings.Contains(r.Observation, "< Prev [SEP] Next > [SEP] ") {
			t.Fatalf("page %d: no Next > (the original shows it on every results page): %s", p, r.Observation)
		}
		acts, _ := e.ValidActions(bg)
		n := 0
		for _, a := range acts {
			if strings.HasPrefix(a, "click[b0") {
				if seen[a] {
					t.Fatalf("product %s on two pages", a)
				}
				seen[a] = true
				n++
			}
		}
		if n != 10 {
			t.Fatalf("page %d lists %d products", p, n)
		}
	}
	// Past the last result: an empty page 6 with < Prev and Next >, as the original.
	if r := mustStep(t, e, "click[next >]"); r.Info["valid"] != true ||
		!strings.HasSuffix(r.Observation, "Back to Search [SEP] Page 6 (Total results: 50) [SEP] < Prev [SEP] Next >") {
		t.Fatalf("page 6: %+v", r)
	}
	mustStep(t, e, "click[< prev]")
	// An item opened from page 5 goes back to page 5.
	acts, _ := e.ValidActions(bg)
	mustStep(t, e, acts[len(acts)-1])
	if r := mustStep(t, e, "click[< prev]"); !strings.Contains(r.Observation, "Page 5 (Total results: 50)") {
		t.Fatalf("< prev from an item: %s", r.Observation)
	}
	for p := 4; p >= 1; p-- {
		r = mustStep(t, e, "click[< prev]")
	}
	if r.Observation != page1 {
		t.Fatalf("back on page 1:\n%s\nwant\n%s", r.Observation, page1)
	}
}

func TestEnvErrors(t *testing.T) {
	e, err := New(envOpts(tinyShop(t)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Reset(bg, "boil", 0, 0); !errors.Is(err, environments.ErrUnknownTask) {
		t.Fatalf("unknown task: %v", err)
	}
	for _, v := range []int{-1, len(e.goals)} {
		if _, err := e.Reset(bg, "webshop", v, 0); !errors.Is(err, environments.ErrBadVariation) {
			t.Fatalf("variation %d: %v", v, err)
		}
		if _, err := e.GoldActions(bg, "webshop", v); !errors.Is(err, environments.ErrBadVariation) {
			t.Fatalf("gold variation %d: %v", v, err)
		}
	}
	e.Close()
	e.Close()
	if _, err := e.Reset(bg, "webshop", 0, 0); !errors.Is(err, environments.ErrClosed) {
		t.Fatalf("Reset after Close: %v", err)
	}
	if _, err := New(environments.Options{Extra: map[string]string{"goals": "robot"}}); err == nil {
		t.Fatal("bad goals option accepted")
	}
	if _, err := New(environments.Options{Extra: map[string]string{"products": "many"}}); err == nil {
		t.Fatal("bad products option accepted")
	}
}

func TestHumanGoals(t *testing.T) {
	o := envOpts(tinyShop(t))
	o.Extra = map[string]string{"goals": "human"}
	e, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.goals) != 1 || !e.goals[0].Human {
		t.Fatalf("human goals: %+v", e.goals)
	}
	g := e.goals[0]
	if !strings.HasPrefix(g.Instruction, "i want a long lasting nude lipstick, and price lower than ") {
		t.Fatalf("human instruction %q (the trailing dot goes, the price clause comes)", g.Instruction)
	}
	acts, err := e.GoldActions(bg, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Reset(bg, "webshop", 0, 0); err != nil {
		t.Fatal(err)
	}
	var r environments.StepResult
	for _, a := range acts {
		r = mustStep(t, e, a)
	}
	if !r.Done || r.Info["won"] != true {
		t.Fatalf("gold on the human goal: %v → %+v", acts, r)
	}
}

// TestCorrectActions: with Extra[correct_actions] an invalid action on a
// page with clickables becomes the most similar clickable (Jaccard over
// words); searches are never invented.
func TestCorrectActions(t *testing.T) {
	o := envOpts(tinyShop(t))
	o.Extra = map[string]string{environments.ExtraCorrectActions: "jaccard"}
	e, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Reset(bg, "webshop", 0, 0); err != nil {
		t.Fatal(err)
	}
	if r := mustStep(t, e, "click[buy]"); r.Info["valid"] != false || r.Info["corrected_from"] != nil {
		t.Fatalf("search page: %+v", r.Info)
	}
	mustStep(t, e, "search[shampoo]")
	r := mustStep(t, e, "click[b000000002 please]")
	if r.Info["valid"] != true || r.Info["corrected_from"] != "click[b000000002 please]" || !strings.Contains(r.Observation, "Acme Blue Shampoo [SEP] Price:") {
		t.Fatalf("corrected click: %+v", r)
	}
	if r := mustStep(t, e, "press[Reviews]"); r.Info["corrected_from"] != "press[Reviews]" || !strings.HasSuffix(r.Observation, "< Prev") {
		t.Fatalf("press[Reviews]: %+v", r)
	}
	mustStep(t, e, "click[< prev]")
	if r := mustStep(t, e, "click[description]"); r.Info["corrected_from"] != nil {
		t.Fatalf("a valid click was corrected: %+v", r.Info)
	}
}

// TestPartialPurchase: the lipstick with the wrong options. "ruby | red"
// normalises to "red", which matches neither goal option ("nude", and the
// tuple ('size', 'large')) and earns nothing even though "red" is in the
// title (the original has no text fallback); "small" is not "large"
// (tokens {small} vs {size, large}). Reward (1 attribute + 0 options +
// price) / (1 + 2 + 1) = 0.5.
func TestPartialPurchase(t *testing.T) {
	e, err := New(envOpts(tinyShop(t)))
	if err != nil {
		t.Fatal(err)
	}
	v := goalIndex(t, e, map[string]string{"color": "nude", "size": "large"})
	if _, err := e.Reset(bg, "webshop", v, 0); err != nil {
		t.Fatal(err)
	}
	var r environments.StepResult
	for _, a := range []string{"search[red lipstick]", "click[b000000001]", "click[ruby | red]", "click[small]", "click[buy now]"} {
		r = mustStep(t, e, a)
	}
	if !r.Done || r.Reward != 50 || e.Score() != 50 || r.Info["won"] != false || r.Info["raw_reward"] != 0.5 || r.Info["r_option"] != 0.0 {
		t.Fatalf("partial purchase: %+v", r)
	}
	if !strings.Contains(r.Observation, "Your score (min 0.0, max 1.0) [SEP] 0.5 [SEP]") {
		t.Fatalf("done page: %s", r.Observation)
	}
	// Another product type of the same brand: the shared proper noun "acme"
	// gives a title score of 1/3 (> 0.2), so the type factor stays 1, as the
	// original's noun overlap would; only the price matches: 1/4.
	if _, err := e.Reset(bg, "webshop", v, 0); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"search[shampoo]", "click[b000000002]", "click[buy now]"} {
		r = mustStep(t, e, a)
	}
	if !r.Done || r.Reward != 25 || r.Info["r_type"] != 1.0 || !near(r.Info["title_score"].(float64), 1.0/3) || r.Info["won"] != false {
		t.Fatalf("shampoo for a lipstick goal: %+v", r.Info)
	}
}

// TestParseAction: the split of re.match(r'(.+)\[(.+)\]', action), worked
// out by hand; the argument is lower-cased (as step() does), nothing is
// trimmed and the name keeps its case. Lenient mode trims both and
// lower-cases the name.
func TestParseAction(t *testing.T) {
	for _, c := range []struct {
		in, name, arg string
		ok            bool
		lenient       bool
	}{
		{"click[buy now]", "click", "buy now", true, false},
		{"search[Red Shoes]", "search", "red shoes", true, false},
		{"click[Next >]", "click", "next >", true, false},                   // the argument is lower-cased
		{"click[ next > ]", "click", " next > ", true, false},               // but not trimmed: no such clickable
		{"Click[next >]", "Click", "next >", true, false},                   // the name keeps its case: no click
		{"click[buy now].", "click", "buy now", true, false},                // text after the last ']' is ignored
		{"click[buy now] because it fits", "click", "buy now", true, false}, // likewise
		{"search[a [b] c]", "search[a ", "b] c", true, false},               // greedy name: the last '[' before the last ']'
		{"click[[x]]", "click[", "x]", true, false},
		{"click[x]\nclick[y]", "click", "x", true, false}, // '.' stops at the first line break
		{"  Click [ Next > ] ", "  Click ", " next > ", true, false},
		{"  Click [ Next > ] ", "click", "next >", true, true},
		{"click[]", "", "", false, false}, // the argument needs a character
		{"[x]", "", "", false, false},     // so does the name
		{"click", "", "", false, false},
		{"", "", "", false, false},
		{"\nclick[x]", "", "", false, false},
	} {
		name, arg, ok := parseActionMode(c.in, c.lenient)
		if name != c.name || arg != c.arg || ok != c.ok {
			t.Errorf("parseActionMode(%q, %v) = %q, %q, %v; want %q, %q, %v", c.in, c.lenient, name, arg, ok, c.name, c.arg, c.ok)
		}
	}
}

// TestStrictActions plays the original's action rules through the
// environment: "click[Next >]" pages, "click[ next > ]" and "Click[next >]"
// change nothing, "search[   ]" runs a search (its keywords are not empty);
// with actions=lenient the spaced and capitalised forms work.
func TestStrictActions(t *testing.T) {
	for _, lenient := range []bool{false, true} {
		o := envOpts(tinyShop(t))
		if lenient {
			o.Extra = map[string]string{"actions": "lenient"}
		}
		e, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Reset(bg, "webshop", 0, 0); err != nil {
			t.Fatal(err)
		}
		if r := mustStep(t, e, "search[   ]"); r.Info["valid"] != !lenient || (!lenient && !strings.Contains(r.Observation, "Page 1 (Total results: 0)")) {
			t.Fatalf("lenient=%v: search[   ]: %+v", lenient, r)
		}
		mustStep(t, e, "search[lipstick]")
		for _, a := range []string{"click[ next > ]", "Click[next >]"} {
			if r := mustStep(t, e, a); r.Info["valid"] != lenient {
				t.Fatalf("lenient=%v: %q: %+v", lenient, a, r)
			}
			if lenient {
				mustStep(t, e, "click[< prev]")
			}
		}
		if r := mustStep(t, e, "click[Next >]"); r.Info["valid"] != true || !strings.Contains(r.Observation, "Page 2") {
			t.Fatalf("lenient=%v: click[Next >]: %+v", lenient, r)
		}
	}
}

// TestBadOptions: an unknown option value is an ErrBadOption.
func TestBadOptions(t *testing.T) {
	for _, kv := range [][2]string{{"reward", "bogus"}, {"reviews", "all"}, {"actions", "loose"}, {"goals", "robots"}, {"products", "-3"}} {
		o := envOpts("")
		o.Extra = map[string]string{kv[0]: kv[1]}
		if _, err := New(o); !errors.Is(err, ErrBadOption) {
			t.Errorf("%s=%s: %v, want ErrBadOption", kv[0], kv[1], err)
		}
	}
	o := envOpts("")
	o.Extra = map[string]string{"reward": "Fixed", "reviews": "keep", "actions": "lenient"}
	if _, err := New(o); err != nil {
		t.Fatal(err)
	}
}
