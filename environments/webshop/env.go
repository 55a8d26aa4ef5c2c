package webshop

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/empo2/empo2/environments"
)

// Names and limits of the environment.
const (
	EnvName          = "webshop"
	TaskName         = "webshop"
	DefaultStepLimit = 15
	testGoals        = 500
	// GoalsEnvVar selects the goal set ("synthetic" or "human") when
	// Options.Extra["goals"] is empty.
	GoalsEnvVar = "EMPO2_WEBSHOP_GOALS"
)

// Button texts of the original's pages.
const (
	btnBackToSearch = "Back to Search"
	btnNext         = "Next >"
	btnPrev         = "< Prev"
	btnBuy          = "Buy Now"
	sep             = " [SEP] "
)

var subPages = []string{"Description", "Features", "Reviews"}

func init() {
	environments.Register(environments.Spec{
		Name:        EnvName,
		Description: "WebShop (native Go): search a product catalogue, pick options and buy what the instruction asks for",
		New:         func(o environments.Options) (environments.Env, error) { return New(o) },
		Tasks:       Tasks,
	})
}

// config is what Options select.
type config struct {
	dataDir   string
	human     bool
	lo        LoadOptions
	stepLimit int
	correct   bool
	rule      RewardRule
	lenient   bool // actions=lenient: case-insensitive name, trimmed parts
}

func parseOptions(o environments.Options) (config, error) {
	c := config{dataDir: o.DataDir, stepLimit: o.StepLimit, correct: environments.CorrectionEnabled(o)}
	if c.stepLimit <= 0 {
		c.stepLimit = DefaultStepLimit
	}
	goals := o.Extra["goals"]
	if goals == "" {
		goals = os.Getenv(GoalsEnvVar) // lets `empo2 env play|gold` pick human goals
	}
	switch g := strings.ToLower(goals); g {
	case "", "synthetic":
	case "human":
		c.human = true
	default:
		return c, fmt.Errorf("%w: goals %q (Extra[goals] or %s): want synthetic or human", ErrBadOption, g, GoalsEnvVar)
	}
	switch v := strings.ToLower(o.Extra["reward"]); v {
	case "", "original":
	case "fixed":
		c.rule = RewardFixed
	default:
		return c, fmt.Errorf("%w: Extra[reward] = %q: want original or fixed", ErrBadOption, v)
	}
	switch v := strings.ToLower(o.Extra["reviews"]); v {
	case "", "none":
	case "keep":
		c.lo.KeepReviews = true
	default:
		return c, fmt.Errorf("%w: Extra[reviews] = %q: want none or keep", ErrBadOption, v)
	}
	switch v := strings.ToLower(o.Extra["actions"]); v {
	case "", "original":
	case "lenient":
		c.lenient = true
	default:
		return c, fmt.Errorf("%w: Extra[actions] = %q: want original or lenient", ErrBadOption, v)
	}
	if s := o.Extra["products"]; s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return c, fmt.Errorf("%w: Extra[products] = %q: want a product count", ErrBadOption, s)
		}
		c.lo.MaxProducts = n
	}
	return c, nil
}

func loadFor(c config) (*Catalog, []Goal, error) {
	cat, err := cachedCatalog(c.dataDir, c.lo)
	if err != nil {
		return nil, nil, err
	}
	goals := cat.Goals(c.human)
	if len(goals) == 0 {
		kind := "synthetic"
		if c.human {
			kind = "human"
		}
		return nil, nil, fmt.Errorf("%w: no %s goals (is the instructions file there?)", ErrNoGoals, kind)
	}
	return cat, goals, nil
}

// Split returns the test and train goal indexes for n goals: the first 500
// goals are the test set and the rest train, as in verl-agent; with fewer
// than 1000 goals the first half is the test set.
func Split(n int) (test, train []int) {
	nt := testGoals
	if n < 2*testGoals {
		nt = n / 2
	}
	for i := 0; i < n; i++ {
		if i < nt {
			test = append(test, i)
		} else {
			train = append(train, i)
		}
	}
	return test, train
}

// Tasks lists the single WebShop task with its goal split.
func Tasks(o environments.Options) ([]environments.Task, error) {
	c, err := parseOptions(o)
	if err != nil {
		return nil, err
	}
	_, goals, err := loadFor(c)
	if err != nil {
		return nil, err
	}
	test, train := Split(len(goals))
	return []environments.Task{{
		Name:        TaskName,
		Description: "buy the product (with its options, under the price) that an instruction describes",
		Variations:  len(goals),
		Train:       train,
		TestVars:    test,
		StepLimit:   c.stepLimit,
	}}, nil
}

type pageKind int

const (
	pageNone pageKind = iota
	pageSearch
	pageResults
	pageItem
	pageSub
	pageDone
)

// Env is one WebShop session.
type Env struct {
	cat       *Catalog
	goals     []Goal
	stepLimit int
	correct   bool // replace an invalid click by the most similar clickable
	rule      RewardRule
	lenient   bool

	goal       *Goal
	variation  int
	page       pageKind
	keywords   string
	results    []*Product
	pageNum    int
	product    *Product
	options    map[string]string
	subPage    string
	steps      int
	done       bool
	reward     float64
	rewardInfo RewardInfo
	closed     bool
	obs        string
	clickable  map[string]func() // lower-cased clickable text → what it does
	order      []string          // clickables in page order
}

var (
	_ environments.Env          = (*Env)(nil)
	_ environments.GoldProvider = (*Env)(nil)
)

// New opens an environment; catalogues are loaded once per process and shared.
func New(o environments.Options) (*Env, error) {
	c, err := parseOptions(o)
	if err != nil {
		return nil, err
	}
	cat, goals, err := loadFor(c)
	if err != nil {
		return nil, err
	}
	return &Env{cat: cat, goals: goals, stepLimit: c.stepLimit, correct: c.correct, rule: c.rule, lenient: c.lenient}, nil
}

// Catalog returns the catalogue the environment plays in.
func (e *Env) Catalog() *Catalog { return e.cat }

// Goal returns goal i of the environment's goal list.
func (e *Env) Goal(i int) (Goal, error) {
	if i < 0 || i >= len(e.goals) {
		return Goal{}, fmt.Errorf("%w: goal %d of %d", environments.ErrBadVariation, i, len(e.goals))
	}
	return e.goals[i], nil
}

func checkTask(task string) error {
	if task != TaskName && task != "" {
		return fmt.Errorf("%w: %q (webshop has the task %q)", environments.ErrUnknownTask, task, TaskName)
	}
	return nil
}

// Reset starts an episode on goal variation; seed is unused (episodes are
// deterministic).
func (e *Env) Reset(ctx context.Context, task string, variation int, seed int64) (environments.ResetResult, error) {
	if e.closed {
		return environments.ResetResult{}, environments.ErrClosed
	}
	if err := checkTask(task); err != nil {
		return environments.ResetResult{}, err
	}
	if _, err := e.Goal(variation); err != nil {
		return environments.ResetResult{}, err
	}
	e.goal = &e.goals[variation]
	e.variation = variation
	e.steps, e.done, e.reward = 0, false, 0
	e.toSearchPage()
	return environments.ResetResult{
		Observation:     e.obs,
		TaskDescription: e.goal.Instruction,
		Info:            environments.Info{"goal": variation, "human_goal": e.goal.Human, "page": "search"},
	}, nil
}

// parseAction splits an action as the original's parse_action does with
// re.match(r'(.+)\[(.+)\]', action): on the first line, the argument ends
// at the last ']' and starts after the last '[' before it that leaves it
// non-empty; the name is everything before that '[' (non-empty); text after
// the ']' is ignored. The argument is lower-cased (step() does), nothing is
// trimmed and the name keeps its case: "click[ next > ]" names no
// clickable, "Click[next >]" is no click, while "click[Next >]" is
// "next >". With lenient the name is lower-cased and both parts trimmed.
func parseActionMode(action string, lenient bool) (name, arg string, ok bool) {
	line, _, _ := strings.Cut(action, "\n")
	j := strings.LastIndexByte(line, ']')
	if j < 2 {
		return "", "", false
	}
	i := strings.LastIndexByte(line[:j-1], '[')
	if i < 1 {
		return "", "", false
	}
	name, arg = line[:i], strings.ToLower(line[i+1:j])
	if lenient {
		name, arg = strings.ToLower(strings.TrimSpace(name)), strings.TrimSpace(arg)
	}
	return name, arg, true
}

// parseAction is parseActionMode with the original's rules.
func parseAction(action string) (name, arg string, ok bool) { return parseActionMode(action, false) }

func (e *Env) parse(action string) (name, arg string, ok bool) {
	return parseActionMode(action, e.lenient)
}

// Step applies "search[keywords]" (from any page, as the original's step)
// or "click[text]" (a clickable of the current page). Any other action
// changes nothing, earns 0 and counts as a step.
func (e *Env) Step(ctx context.Context, action string) (environments.StepResult, error) {
	switch {
	case e.closed:
		return environments.StepResult{}, environments.ErrClosed
	case e.goal == nil:
		return environments.StepResult{}, environments.ErrNotReset
	case e.done:
		return environments.StepResult{}, environments.ErrEpisodeDone
	}
	if err := ctx.Err(); err != nil {
		return environments.StepResult{}, err
	}
	e.steps++
	valid := false
	var stepErr error
	reward := 0.0
	corrected := ""
	if e.correct && e.page != pageSearch && !e.isValidClick(action) && !e.isSearch(action) && len(e.order) > 0 {
		// Compare the argument (or the whole text) with the clickables' texts,
		// so that the brackets do not get in the way of the word overlap.
		text := action
		if _, arg, ok := e.parse(action); ok {
			text = strings.TrimSpace(arg)
		}
		fixed, _ := environments.CorrectAction(text, e.order)
		if next := "click[" + fixed + "]"; next != action {
			corrected, action = action, next
		}
	}
	if name, arg, ok := e.parse(action); ok {
		switch {
		case name == "search" && arg != "":
			// As the original's step(): a search runs from any page, not only
			// from the one with the search bar.
			valid = true
			stepErr = e.search(arg, 1)
		case name == "click" && arg != "search":
			if f, ok := e.clickable[arg]; ok {
				valid = true
				f()
				if e.page == pageDone {
					reward = 100 * e.reward
				}
			}
		}
	}
	if stepErr != nil {
		return environments.StepResult{}, stepErr
	}
	info := environments.Info{"valid": valid, "steps": e.steps, "page": e.pageName()}
	if corrected != "" {
		info["corrected_from"] = corrected
	}
	if e.page == pageDone {
		info["won"] = e.reward == 1 // success is reward 1.0 exactly
		info["raw_reward"] = e.reward
		ri := e.rewardInfo
		info["r_type"] = ri.Type.RType
		info["title_score"] = ri.Type.TitleScore
		info["query_match"] = ri.Type.QueryMatch
		info["category_match"] = ri.Type.CategoryMatch
		info["r_att"] = float64(ri.AttrMatches) / float64(max(ri.NumAttributes, 1))
		if ri.NumGoalOptions > 0 {
			info["r_option"] = float64(ri.OptionMatches) / float64(ri.NumGoalOptions)
		}
		info["r_price"] = ri.PriceOK
	}
	if !e.done && e.steps >= e.stepLimit {
		e.done = true
		info[environments.InfoTruncated] = true
		info["won"] = false
		info["raw_reward"] = 0.0
	}
	return environments.StepResult{Observation: e.obs, Reward: reward, Done: e.done, Info: info}, nil
}

// isSearch reports whether action is a search with keywords.
func (e *Env) isSearch(action string) bool {
	name, arg, ok := e.parse(action)
	return ok && name == "search" && arg != ""
}

func (e *Env) isValidClick(action string) bool {
	name, arg, ok := e.parse(action)
	if !ok || name != "click" {
		return false
	}
	_, ok = e.clickable[arg]
	return ok
}

func (e *Env) pageName() string {
	return [...]string{"none", "search", "results", "item", "sub", "done"}[e.page]
}

// ValidActions lists the actions the current page offers: "search[<query>]"
// on the search page (any non-empty query), "click[...]" for the clickables
// elsewhere. (A search typed on another page runs too, as in the original,
// but the page does not offer it: its search bar is on the search page.)
func (e *Env) ValidActions(ctx context.Context) ([]string, error) {
	if e.closed {
		return nil, environments.ErrClosed
	}
	if e.goal == nil {
		return nil, environments.ErrNotReset
	}
	if e.done {
		return nil, nil
	}
	if e.page == pageSearch {
		return []string{"search[<query>]"}, nil
	}
	out := make([]string, len(e.order))
	for i, c := range e.order {
		out[i] = "click[" + c + "]"
	}
	return out, nil
}

// Score is 100 × the purchase reward (0 before a purchase).
func (e *Env) Score() float64 { return 100 * e.reward }

// Close ends the environment; the shared catalogue stays loaded.
func (e *Env) Close() error {
	e.closed = true
	return nil
}

// --- pages ---

func (e *Env) setClickables(items ...any) {
	e.clickable = map[string]func(){}
	e.order = e.order[:0]
	for i := 0; i+1 < len(items); i += 2 {
		text := strings.ToLower(items[i].(string))
		if _, dup := e.clickable[text]; !dup {
			e.order = append(e.order, text)
		}
		e.clickable[text] = items[i+1].(func())
	}
}

func joinTexts(texts ...string) string {
	var b strings.Builder
	first := true
	for _, t := range texts {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		if !first {
			b.WriteString(sep)
		}
		b.WriteString(t)
		first = false
	}
	return b.String()
}

func (e *Env) header() []string {
	return []string{"Instruction:", e.goal.Instruction, btnBackToSearch}
}

func (e *Env) toSearchPage() {
	e.page = pageSearch
	e.keywords, e.results, e.pageNum, e.product, e.subPage = "", nil, 0, nil, ""
	e.options = map[string]string{}
	e.obs = joinTexts("WebShop", "Instruction:", e.goal.Instruction, "Search")
	e.setClickables()
}

// search shows results page pageNum for keywords (the original re-runs the
// search on every results page and forgets chosen options).
func (e *Env) search(keywords string, pageNum int) error {
	res, err := e.cat.Search(keywords)
	if err != nil {
		return err
	}
	e.page = pageResults
	e.keywords, e.results, e.pageNum, e.product, e.subPage = keywords, res, pageNum, nil, ""
	e.options = map[string]string{}
	texts := append(e.header(), fmt.Sprintf("Page %d (Total results: %d)", pageNum, len(res)))
	clicks := []any{btnBackToSearch, func() { e.toSearchPage() }}
	if pageNum > 1 {
		texts = append(texts, btnPrev)
		clicks = append(clicks, btnPrev, func() { _ = e.search(e.keywords, e.pageNum-1) })
	}
	// The results template of the original's text-mode era shows "Next >" on
	// every results page, past the last result too (an empty page follows).
	texts = append(texts, btnNext)
	clicks = append(clicks, btnNext, func() { _ = e.search(e.keywords, e.pageNum+1) })
	lo := (pageNum - 1) * productWindow
	for i := lo; i < lo+productWindow && i < len(res); i++ {
		p := res[i]
		texts = append(texts, p.ASIN, p.Title, p.PriceTag)
		clicks = append(clicks, p.ASIN, func() { e.toItem(p) })
	}
	e.obs = joinTexts(texts...)
	e.setClickables(clicks...)
	return nil
}

func (e *Env) backToResults() { _ = e.search(e.keywords, e.pageNum) }

func (e *Env) toItem(p *Product) {
	e.page = pageItem
	e.product, e.subPage = p, ""
	texts := append(e.header(), btnPrev)
	clicks := []any{btnBackToSearch, func() { e.toSearchPage() }, btnPrev, e.backToResults}
	for _, g := range p.Options {
		texts = append(texts, g.Name)
		for _, v := range g.Values {
			texts = append(texts, v)
			clicks = append(clicks, v, func() {
				if name, ok := p.optionGroupOf(v); ok {
					e.options[name] = v
				}
				e.toItem(p)
			})
		}
	}
	texts = append(texts, p.Title, "Price: "+p.PriceTag, "Rating: "+p.Rating)
	for _, s := range subPages {
		texts = append(texts, s)
		clicks = append(clicks, s, func() { e.toSub(s) })
	}
	texts = append(texts, btnBuy)
	clicks = append(clicks, btnBuy, e.buy)
	e.obs = joinTexts(texts...)
	e.setClickables(clicks...)
}

func (e *Env) toSub(name string) {
	p := e.product
	e.page = pageSub
	e.subPage = name
	texts := append(e.header(), btnPrev)
	switch name {
	case "Description":
		texts = append(texts, p.Description)
	case "Features":
		texts = append(texts, p.BulletPoints...)
	case "Reviews":
		for _, r := range p.Reviews {
			// The template puts the title in double quotes.
			texts = append(texts, `"`+r.Title+`"`, r.Score, r.Body)
		}
	}
	e.obs = joinTexts(texts...)
	e.setClickables(btnBackToSearch, func() { e.toSearchPage() }, btnPrev, func() { e.toItem(p) })
}

func (e *Env) buy() {
	p := e.product
	ri := RewardWith(p, e.goal, e.cat.Prices[p.ASIN], e.options, e.rule)
	e.reward, e.rewardInfo = ri.Reward, ri
	e.done = true
	e.page = pageDone
	opts, _ := json.Marshal(e.options)
	e.obs = joinTexts("Thank you for shopping with us!", "Your score (min 0.0, max 1.0)", pyFloat(ri.Reward),
		"Purchased", "asin", p.ASIN, "options", string(opts))
	e.setClickables()
}

// --- gold actions ---

// GoldActions returns an action sequence that buys the goal's target product
// with its options: a search that finds it, "next >" to its results page,
// the product, one click per option, "buy now". For human goals each option
// group takes the value that best matches a goal option.
func (e *Env) GoldActions(ctx context.Context, task string, variation int) ([]string, error) {
	if err := checkTask(task); err != nil {
		return nil, err
	}
	if _, err := e.Goal(variation); err != nil {
		return nil, err
	}
	g := &e.goals[variation]
	p, ok := e.cat.Product(g.ASIN)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownASIN, g.ASIN)
	}
	query, rank := "", -1
	for _, q := range goldQueries(g, p) {
		res, err := e.cat.Search(q)
		if err != nil {
			return nil, err
		}
		for i, r := range res {
			if r == p {
				query, rank = q, i
				break
			}
		}
		if rank >= 0 {
			break
		}
	}
	if rank < 0 {
		return nil, fmt.Errorf("webshop: goal %d: no search finds product %s", variation, p.ASIN)
	}
	acts := []string{"search[" + query + "]"}
	for i := 0; i < rank/productWindow; i++ {
		acts = append(acts, "click["+strings.ToLower(btnNext)+"]")
	}
	acts = append(acts, "click["+strings.ToLower(p.ASIN)+"]")
	for _, grp := range p.Options {
		if v, ok := goldOption(g, grp); ok {
			acts = append(acts, "click["+v+"]")
		}
	}
	acts = append(acts, "click["+strings.ToLower(btnBuy)+"]")
	return acts, nil
}

var priceClause = regexp.MustCompile(`, and price lower than [\d.]+ dollars$`)

// goldQueries are the searches tried in order: the instruction without its
// price clause, the product's query with the goal attributes, the title.
func goldQueries(g *Goal, p *Product) []string {
	instr := strings.ToLower(priceClause.ReplaceAllString(g.Instruction, ""))
	clean := func(s string) string {
		return strings.Join(strings.Fields(strings.NewReplacer("[", " ", "]", " ").Replace(s)), " ")
	}
	return []string{
		clean(instr),
		clean(strings.ToLower(p.Query + " " + strings.Join(g.Attributes, " "))),
		clean(strings.ToLower(p.Title)),
	}
}

func goldOption(g *Goal, grp OptionGroup) (string, bool) {
	if g.OptionsByName != nil {
		v, ok := g.OptionsByName[grp.Name]
		return v, ok
	}
	for _, v := range grp.Values {
		for _, o := range g.Options {
			if v == o {
				return v, true
			}
		}
	}
	best, bestScore := "", 85
	for _, v := range grp.Values {
		for _, o := range g.Options {
			if s := tokenSetRatio(o, v); s > bestScore {
				best, bestScore = v, s
			}
		}
	}
	return best, best != ""
}
