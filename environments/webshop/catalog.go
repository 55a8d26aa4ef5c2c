package webshop

import (
	"fmt"
	"path/filepath"
	"sync"
)

// goalShuffleSeed is the seed of the original's random.shuffle of the goals.
const goalShuffleSeed = 233

// Catalog is a loaded product catalogue with its goals and search index. It
// is read-only after loading and shared by all environments that use it.
type Catalog struct {
	Products []*Product
	byASIN   map[string]int
	Prices   map[string]float64 // the price each product is sold at
	// Goals in the original's order (shuffled with Python's seed 233).
	SyntheticGoals []Goal
	HumanGoals     []Goal
	index          *searchIndex
}

// LoadOptions selects what to load.
type LoadOptions struct {
	// MaxProducts keeps only the first products of the file (the original's
	// num_products); 0 keeps all.
	MaxProducts int
	// KeepReviews shows the ratings and reviews of reviews*.json (or of the
	// synthetic catalogue). The original's current load_products never
	// loads them (the lines are commented out), so by default every item
	// shows "Rating: N.A." and an empty Reviews page.
	KeepReviews bool
}

func newCatalog(rd *rawData, lo LoadOptions) (*Catalog, error) {
	products, err := buildProducts(rd, lo.MaxProducts, lo.KeepReviews)
	if err != nil {
		return nil, err
	}
	if len(products) == 0 {
		return nil, fmt.Errorf("%w: no usable product", ErrBadData)
	}
	c := &Catalog{Products: products, byASIN: make(map[string]int, len(products))}
	for i, p := range products {
		c.byASIN[p.ASIN] = i
	}
	c.Prices = productPrices(products)
	c.SyntheticGoals = syntheticGoals(products, c.Prices)
	c.HumanGoals = humanGoals(products, c.Prices)
	for _, gs := range [][]Goal{c.SyntheticGoals, c.HumanGoals} {
		newPyRandom(goalShuffleSeed).shuffle(len(gs), func(i, j int) { gs[i], gs[j] = gs[j], gs[i] })
	}
	c.index, err = newSearchIndex(products)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// LoadFiles loads a catalogue from the original's data files.
func LoadFiles(f Files, lo LoadOptions) (*Catalog, error) {
	rd, err := readFiles(f)
	if err != nil {
		return nil, err
	}
	return newCatalog(rd, lo)
}

// LoadDir loads the data files found in dir (see FindFiles).
func LoadDir(dir string, lo LoadOptions) (*Catalog, error) {
	f, err := FindFiles(dir)
	if err != nil {
		return nil, err
	}
	return LoadFiles(f, lo)
}

// Synthetic builds the synthetic catalogue of n products (without reviews,
// as the original shows them).
func Synthetic(n int, seed int64) (*Catalog, error) { return syntheticWith(n, seed, false) }

func syntheticWith(n int, seed int64, keepReviews bool) (*Catalog, error) {
	rd, err := syntheticRaw(n, seed)
	if err != nil {
		return nil, err
	}
	return newCatalog(rd, LoadOptions{KeepReviews: keepReviews})
}

// Product returns the product with the given ASIN.
func (c *Catalog) Product(asin string) (*Product, bool) {
	i, ok := c.byASIN[asin]
	if !ok {
		return nil, false
	}
	return c.Products[i], true
}

// Search returns the top products for the keywords (at most 50), best first.
func (c *Catalog) Search(keywords string) ([]*Product, error) {
	idx, err := c.index.Search(keywords)
	if err != nil {
		return nil, err
	}
	out := make([]*Product, len(idx))
	for i, k := range idx {
		out[i] = c.Products[k]
	}
	return out, nil
}

// Goals returns the human or the synthetic goals.
func (c *Catalog) Goals(human bool) []Goal {
	if human {
		return c.HumanGoals
	}
	return c.SyntheticGoals
}

// Catalogues are shared between environment instances: one per source.
var (
	catMu    sync.Mutex
	catCache = map[string]*catEntry{}
)

type catEntry struct {
	once sync.Once
	cat  *Catalog
	err  error
}

// cachedCatalog returns the catalogue of dir ("" = the default synthetic
// one), loading it once per process.
func cachedCatalog(dir string, lo LoadOptions) (*Catalog, error) {
	key := fmt.Sprintf("synthetic:%d:%v", lo.MaxProducts, lo.KeepReviews)
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			abs = dir
		}
		key = fmt.Sprintf("dir:%s:%d:%v", abs, lo.MaxProducts, lo.KeepReviews)
	}
	catMu.Lock()
	e, ok := catCache[key]
	if !ok {
		e = &catEntry{}
		catCache[key] = e
	}
	catMu.Unlock()
	e.once.Do(func() {
		if dir == "" {
			n := DefaultSyntheticProducts
			if lo.MaxProducts > 0 {
				n = lo.MaxProducts
			}
			e.cat, e.err = syntheticWith(n, DefaultSyntheticSeed, lo.KeepReviews)
		} else {
			e.cat, e.err = LoadDir(dir, lo)
		}
	})
	if e.err != nil {
		catMu.Lock()
		delete(catCache, key) // allow a retry after fixing the files
		catMu.Unlock()
	}
	return e.cat, e.err
}
