package webshop

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"

	"github.com/empo2/empo2/internal/safefile"
)

// The synthetic catalogue mimics the real WebShop data files: the same JSON
// layout, five top-level categories, product types with realistic titles,
// bullet points, descriptions, option groups, attributes, items_ins_v2-style
// instructions for about 60% of the products and a few human-style ones. It
// is a pure function of (number of products, seed).

// DefaultSyntheticProducts is the catalogue size used when no data directory
// is given.
const DefaultSyntheticProducts = 1000

// DefaultSyntheticSeed seeds the default synthetic catalogue.
const DefaultSyntheticSeed = 1

type synthType struct {
	category string   // WebShop's coarse category
	path     string   // product_category
	noun     string   // the product type, as it appears in titles
	query    string   // the search query the product was scraped with
	attrs    []string // attribute pool
	options  []synthOption
	uses     []string // "for ..." phrases
}

type synthOption struct {
	name   string
	values []string
}

var (
	fashionColors = []string{"Black", "Navy Blue", "Heather Grey", "Wine Red", "Olive Green", "White", "Light Pink", "Khaki", "Royal Blue", "Charcoal"}
	clothingSizes = []string{"X-Small", "Small", "Medium", "Large", "X-Large", "XX-Large"}
	shoeSizes     = []string{"6", "6.5", "7", "7.5", "8", "8.5", "9", "10", "11"}
	gadgetColors  = []string{"Black", "White", "Silver", "Space Gray", "Rose Gold", "Midnight Blue"}
	woodColors    = []string{"Espresso", "Walnut", "White", "Black", "Natural Oak", "Grey Wash"}
	makeupShades  = []string{"Ruby Red", "Nude Beige", "Coral Pink", "Plum", "Mauve", "Cherry", "Rose"}
	flavors       = []string{"Original", "Dark Chocolate", "Peanut Butter", "Vanilla", "Sea Salt Caramel", "Mint", "Strawberry", "Lemon"}
)

var synthTypes = []synthType{
	// beauty
	{"beauty", "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos", "Shampoo", "shampoo",
		[]string{"sulfate free", "paraben free", "natural ingredients", "dry hair", "hair growth", "cruelty free", "tea tree", "argan oil", "damaged hair"},
		[]synthOption{{"Size", []string{"8 Fl Oz (Pack of 1)", "16 Fl Oz (Pack of 1)", "16 Fl Oz (Pack of 2)", "33.8 Fl Oz"}}},
		[]string{"Dry Hair", "Oily Scalp", "Curly Hair", "Daily Use"}},
	{"beauty", "Beauty & Personal Care › Makeup › Lips › Lipstick", "Lipstick", "lipstick",
		[]string{"long lasting", "cruelty free", "highly pigmented", "easy apply", "paraben free", "natural ingredients", "hyaluronic acid"},
		[]synthOption{{"Color", makeupShades}},
		[]string{"Women", "Girls", "Daily Makeup", "Party"}},
	{"beauty", "Beauty & Personal Care › Skin Care › Face › Creams & Moisturizers › Face Moisturizers", "Face Moisturizer", "face moisturizer",
		[]string{"hyaluronic acid", "sensitive skin", "dry skin", "fine lines", "oil free", "fragrance free", "clinically proven", "vitamin c"},
		[]synthOption{{"Size", []string{"1.7 Ounce", "3.4 Ounce", "1.7 Ounce (Pack of 2)"}}},
		[]string{"Sensitive Skin", "Dry Skin", "Men", "Women"}},
	{"beauty", "Beauty & Personal Care › Tools & Accessories › Bags & Cases › Refillable Containers", "Travel Bottles Set", "refillable containers",
		[]string{"leak proof", "bpa free", "easy clean", "travel size", "easy carry", "high quality"},
		[]synthOption{{"Color", []string{"Clear", "Pink", "Blue", "Black"}}, {"Size", []string{"3 Oz", "2 Oz", "1 Oz"}}},
		[]string{"Travel", "Toiletries", "Shampoo and Lotion"}},
	{"beauty", "Beauty & Personal Care › Foot, Hand & Nail Care › Nail Art & Polish › Nail Polish", "Nail Polish", "nail polish",
		[]string{"long lasting", "quick dry", "non toxic", "cruelty free", "easy apply", "high gloss"},
		[]synthOption{{"Color", []string{"Classic Red", "Baby Pink", "Navy", "Glitter Gold", "Black", "Lavender"}}},
		[]string{"Women", "Manicure", "Salon"}},
	// fashion
	{"fashion", "Clothing, Shoes & Jewelry › Men › Clothing › Fashion Hoodies & Sweatshirts", "Hoodie", "men's hoodies",
		[]string{"machine wash", "long sleeve", "soft material", "relaxed fit", "cotton polyester", "drawstring closure", "fleece lined"},
		[]synthOption{{"Color", fashionColors}, {"Size", clothingSizes}},
		[]string{"Men", "Workout", "Casual Wear", "Winter"}},
	{"fashion", "Clothing, Shoes & Jewelry › Women › Clothing › Jumpsuits, Rompers & Overalls", "Jumpsuit", "women's jumpsuits",
		[]string{"slim fit", "machine wash", "short sleeve", "high waist", "polyester spandex", "daily wear", "wide leg"},
		[]synthOption{{"Color", fashionColors}, {"Size", clothingSizes}},
		[]string{"Women", "Summer", "Daily Wear", "Party"}},
	{"fashion", "Clothing, Shoes & Jewelry › Women › Shoes › Athletic › Running", "Running Shoes", "women's running shoes",
		[]string{"non slip", "rubber sole", "memory foam", "lightweight", "breathable mesh", "arch support", "lace up"},
		[]synthOption{{"Color", []string{"Black White", "Grey Pink", "Navy", "All Black", "Mint Green"}}, {"Size", shoeSizes}},
		[]string{"Women", "Walking", "Gym", "Tennis"}},
	{"fashion", "Clothing, Shoes & Jewelry › Men › Clothing › Shirts › T-Shirts", "T-Shirt", "men's t-shirts",
		[]string{"machine wash", "short sleeve", "classic fit", "cotton spandex", "moisture wicking", "quick drying"},
		[]synthOption{{"Color", fashionColors}, {"Size", clothingSizes}},
		[]string{"Men", "Gym", "Everyday"}},
	{"fashion", "Clothing, Shoes & Jewelry › Women › Accessories › Scarves & Wraps", "Scarf", "women's scarves",
		[]string{"soft material", "hand wash", "lightweight", "warm winter", "cashmere feel"},
		[]synthOption{{"Color", fashionColors}},
		[]string{"Women", "Winter", "Travel"}},
	// electronics
	{"electronics", "Electronics › Headphones, Earbuds & Accessories › Headphones & Earbuds › Over-Ear Headphones", "Bluetooth Headphones", "bluetooth headphones",
		[]string{"noise cancelling", "wireless bluetooth", "long battery life", "hands free", "high fidelity", "easy carry", "fast charging"},
		[]synthOption{{"Color", gadgetColors}},
		[]string{"Travel", "Work from Home", "Gaming", "Running"}},
	{"electronics", "Electronics › Computers & Accessories › Cables & Accessories › Cables & Interconnects › USB Cables", "USB C Cable", "usb c cable",
		[]string{"fast charging", "high speed", "nylon braided", "gold plated", "durable", "data transfer"},
		[]synthOption{{"Size", []string{"3 Ft", "6 Ft", "10 Ft", "3 Ft (2 Pack)"}}, {"Color", []string{"Black", "White", "Red"}}},
		[]string{"Phones", "Laptops", "Tablets"}},
	{"electronics", "Electronics › Cell Phones & Accessories › Cases, Holsters & Sleeves › Basic Cases", "Phone Case", "phone case",
		[]string{"shock absorbing", "wireless charging", "slim fit", "scratch resistant", "heavy duty", "easy install"},
		[]synthOption{{"Color", []string{"Clear", "Black", "Purple", "Marble White", "Forest Green"}}},
		[]string{"iPhone 13", "Galaxy S21", "Pixel 6"}},
	{"electronics", "Electronics › Television & Video › Accessories › Remote Controls", "Remote Control", "replacement remote",
		[]string{"easy use", "batteries included", "no programming", "long range", "plug play"},
		[]synthOption{},
		[]string{"Smart TV", "Sound Bar", "Streaming Player"}},
	{"electronics", "Electronics › Camera & Photo › Tripods & Monopods › Complete Tripods", "Camera Tripod", "camera tripod",
		[]string{"aluminum alloy", "quick release", "easy carry", "heavy duty", "non slip", "lightweight"},
		[]synthOption{{"Size", []string{"50 Inch", "60 Inch", "72 Inch"}}},
		[]string{"DSLR", "Phone", "Vlogging"}},
	// food
	{"food", "Grocery & Gourmet Food › Beverages › Coffee, Tea & Cocoa › Tea › Green Tea", "Green Tea", "green tea",
		[]string{"gluten free", "non gmo", "usda organic", "sugar free", "caffeine free", "individually wrapped"},
		[]synthOption{{"Flavor Name", []string{"Jasmine", "Matcha", "Mint", "Lemon Ginger", "Original"}}, {"Size", []string{"20 Count (Pack of 1)", "100 Count", "20 Count (Pack of 6)"}}},
		[]string{"Weight Loss", "Energy", "Relaxation"}},
	{"food", "Grocery & Gourmet Food › Snack Foods › Bars › Protein Bars", "Protein Bars", "protein bars",
		[]string{"gluten free", "low sugar", "high protein", "keto friendly", "non gmo", "plant based", "individually wrapped"},
		[]synthOption{{"Flavor Name", flavors}, {"Size", []string{"12 Count", "24 Count"}}},
		[]string{"Snacks", "Workout", "Breakfast"}},
	{"food", "Grocery & Gourmet Food › Candy & Chocolate › Chocolate › Chocolate Bars", "Dark Chocolate Bar", "dark chocolate",
		[]string{"gluten free", "non gmo", "sugar free", "fair trade", "dairy free", "low carb"},
		[]synthOption{{"Flavor Name", []string{"72% Cacao", "Sea Salt", "Almond", "Orange", "Raspberry"}}, {"Size", []string{"3.5 Ounce (Pack of 1)", "3.5 Ounce (Pack of 12)"}}},
		[]string{"Gifts", "Snacking", "Baking"}},
	{"food", "Grocery & Gourmet Food › Pantry Staples › Jams, Jellies & Sweet Spreads › Nut Butters › Peanut Butter", "Peanut Butter", "peanut butter",
		[]string{"non gmo", "no added sugar", "usda organic", "high protein", "gluten free", "shelf stable"},
		[]synthOption{{"Flavor Name", []string{"Creamy", "Crunchy", "Honey Roasted", "Chocolate"}}, {"Size", []string{"16 Ounce", "28 Ounce", "16 Ounce (Pack of 2)"}}},
		[]string{"Breakfast", "Smoothies", "Kids"}},
	{"food", "Grocery & Gourmet Food › Herbs, Spices & Seasonings › Single Herbs & Spices › Turmeric", "Turmeric Powder", "turmeric",
		[]string{"usda organic", "non gmo", "gluten free", "kosher certified", "non irradiated"},
		[]synthOption{{"Size", []string{"8 Ounce", "1 Pound", "2 Pound"}}},
		[]string{"Cooking", "Golden Milk", "Tea"}},
	// furniture
	{"furniture", "Home & Kitchen › Furniture › Home Office Furniture › Home Office Chairs › Home Office Desk Chairs", "Office Chair", "office chair",
		[]string{"lumbar support", "height adjustable", "easy assemble", "pu leather", "mesh back", "heavy duty", "high back"},
		[]synthOption{{"Color", []string{"Black", "Grey", "White", "Blue", "Pink"}}},
		[]string{"Home Office", "Gaming", "Conference Room"}},
	{"furniture", "Home & Kitchen › Furniture › Living Room Furniture › Bookcases", "Bookshelf", "bookshelf",
		[]string{"easy assemble", "storage space", "engineered wood", "metal frame", "space saving", "industrial style"},
		[]synthOption{{"Color", woodColors}, {"Size", []string{"3 Tier", "4 Tier", "5 Tier"}}},
		[]string{"Living Room", "Bedroom", "Home Office"}},
	{"furniture", "Home & Kitchen › Furniture › Game & Recreation Room Furniture › Home Bar Furniture › Barstools", "Bar Stool", "bar stools",
		[]string{"height adjustable", "pu leather", "easy assemble", "swivel seat", "solid wood", "non slip"},
		[]synthOption{{"Color", []string{"Black", "Brown", "White", "Grey"}}, {"Size", []string{"Set of 2", "Set of 4"}}},
		[]string{"Kitchen Island", "Counter", "Pub"}},
	{"furniture", "Home & Kitchen › Furniture › Bedroom Furniture › Nightstands", "Nightstand", "nightstand",
		[]string{"easy assemble", "storage space", "solid wood", "mid century", "living room", "fully assembled"},
		[]synthOption{{"Color", woodColors}},
		[]string{"Bedroom", "Living Room", "Dorm"}},
	{"furniture", "Home & Kitchen › Furniture › Living Room Furniture › Tables › Coffee Tables", "Coffee Table", "coffee table",
		[]string{"easy assemble", "tempered glass", "storage space", "living room", "solid wood", "modern style"},
		[]synthOption{{"Color", woodColors}},
		[]string{"Living Room", "Office", "Apartment"}},
}

var (
	brandSyllables = []string{"lu", "mo", "ra", "ve", "ki", "so", "na", "tex", "zo", "pri", "ma", "dor", "el", "fy", "qua", "bri", "on", "sta", "vi", "ka"}
	titleAdjs      = []string{"Premium", "Classic", "Upgraded", "Professional", "Everyday", "Deluxe", "Essential", "Modern", "Ultra", "Original"}
	fillers        = []string{
		"Designed with care and tested for quality.",
		"Makes a great gift for friends and family.",
		"Satisfaction guaranteed: contact us with any question.",
		"Suitable for everyday use at home or on the go.",
		"Our team selects every material to last.",
	}
)

func titleCase(s string) string {
	words := strings.Fields(s)
	for i, w := range words {
		words[i] = strings.ToUpper(w[:1]) + w[1:]
	}
	return strings.Join(words, " ")
}

// syntheticFiles are the four JSON documents of a synthetic catalogue.
type syntheticFiles struct {
	products []map[string]any
	attrs    map[string]map[string]any
	human    map[string][]map[string]any
	reviews  []map[string]any
}

func pickN(rng *rand.Rand, pool []string, n int) []string {
	perm := rng.Perm(len(pool))
	if n > len(pool) {
		n = len(pool)
	}
	out := make([]string, n)
	for i := 0; i < n; i++ {
		out[i] = pool[perm[i]]
	}
	return out
}

func generateSynthetic(n int, seed int64) *syntheticFiles {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eb5))
	sf := &syntheticFiles{attrs: map[string]map[string]any{}, human: map[string][]map[string]any{}}
	const asinChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	seen := map[string]bool{}
	for i := 0; i < n; i++ {
		t := synthTypes[rng.IntN(len(synthTypes))]
		var asin string
		for {
			b := []byte("B0")
			for k := 0; k < 8; k++ {
				b = append(b, asinChars[rng.IntN(len(asinChars))])
			}
			asin = string(b)
			if !seen[asin] {
				seen[asin] = true
				break
			}
		}
		brand := ""
		for k := 0; k < 2+rng.IntN(2); k++ {
			brand += brandSyllables[rng.IntN(len(brandSyllables))]
		}
		brand = strings.ToUpper(brand[:1]) + brand[1:]
		attrs := pickN(rng, t.attrs, 2+rng.IntN(3))
		use := t.uses[rng.IntN(len(t.uses))]
		adj := titleAdjs[rng.IntN(len(titleAdjs))]
		title := fmt.Sprintf("%s %s %s %s with %s for %s", brand, adj, titleCase(attrs[0]), t.noun, titleCase(attrs[1]), use)
		if rng.IntN(3) == 0 && len(attrs) > 2 {
			title += ", " + titleCase(attrs[2])
		}
		bullets := []string{
			fmt.Sprintf("%s: our %s is %s and %s.", strings.ToUpper(attrs[0]), strings.ToLower(t.noun), attrs[0], attrs[1]),
		}
		for _, a := range attrs[1:] {
			bullets = append(bullets, fmt.Sprintf("%s - made to be %s, ideal for %s.", titleCase(a), a, strings.ToLower(use)))
		}
		bullets = append(bullets, fillers[rng.IntN(len(fillers))])
		desc := fmt.Sprintf("The %s %s from %s is a %s choice for %s. %s %s",
			strings.ToLower(adj), strings.ToLower(t.noun), brand, strings.Join(attrs, ", "), strings.ToLower(use),
			fillers[rng.IntN(len(fillers))], fillers[rng.IntN(len(fillers))])
		// Options: a random non-empty subset of each group's values.
		custom := map[string]any{}
		var optOrder []string
		for _, og := range t.options {
			vals := pickN(rng, og.values, 2+rng.IntN(3))
			list := make([]map[string]any, len(vals))
			for k, v := range vals {
				list[k] = map[string]any{"value": v, "image": nil}
			}
			custom[og.name] = list
			optOrder = append(optOrder, og.name)
		}
		price := float64(3+rng.IntN(120)) + float64(rng.IntN(100))/100
		pricing := fmt.Sprintf("$%.2f", price)
		if rng.IntN(5) == 0 {
			pricing = fmt.Sprintf("$%.2f - $%.2f", price, price+float64(1+rng.IntN(20)))
		}
		product := map[string]any{
			"asin":                  asin,
			"name":                  title,
			"full_description":      desc,
			"small_description":     bullets,
			"pricing":               pricing,
			"customization_options": orderedMap{keys: optOrder, m: custom},
			"product_category":      t.path,
			"query":                 t.query,
			"category":              t.category,
			"images":                []string{"https://example.invalid/" + asin + ".jpg"},
		}
		sf.products = append(sf.products, product)
		entry := map[string]any{"attributes": attrs}
		if rng.IntN(10) < 6 {
			ia := pickN(rng, attrs, 1+rng.IntN(len(attrs)))
			var instr string
			if len(ia) > 1 && rng.IntN(2) == 0 {
				instr = fmt.Sprintf("Find me %s %s with %s", strings.Join(ia[:len(ia)-1], ", "), t.query, ia[len(ia)-1])
			} else {
				instr = fmt.Sprintf("Find me %s %s", strings.Join(ia, ", "), t.query)
			}
			entry["instruction"] = instr
			entry["instruction_attributes"] = ia
		}
		sf.attrs[asin] = entry
		if rng.IntN(10) < 3 {
			a := attrs[rng.IntN(len(attrs))]
			var opts []string
			text := fmt.Sprintf("i am looking for a %s %s", a, strings.ToLower(t.noun))
			for _, og := range t.options {
				vals := custom[og.name].([]map[string]any)
				v := strings.ToLower(vals[rng.IntN(len(vals))]["value"].(string))
				opts = append(opts, v)
				text += fmt.Sprintf(", %s %s", strings.ToLower(og.name), v)
			}
			sf.human[asin] = append(sf.human[asin], map[string]any{
				"asin": asin, "instruction": text + ".", "instruction_attributes": []string{a},
				"instruction_options": opts,
			})
		}
		var reviews []map[string]any
		for k := 0; k < rng.IntN(3); k++ {
			score := 3 + rng.IntN(3)
			reviews = append(reviews, map[string]any{
				"title": fmt.Sprintf("%s %s", []string{"Great", "Good", "Love this", "Works well"}[rng.IntN(4)], strings.ToLower(t.noun)),
				"score": score,
				"body":  fmt.Sprintf("I bought this %s for %s. It is %s as described.", strings.ToLower(t.noun), strings.ToLower(use), attrs[rng.IntN(len(attrs))]),
			})
		}
		if len(reviews) > 0 {
			sf.reviews = append(sf.reviews, map[string]any{"asin": asin, "reviews": reviews, "average_rating": 4.0 + float64(rng.IntN(10))/10})
		}
	}
	return sf
}

// orderedMap marshals its keys in the given order (customization_options keep
// their order in the files).
type orderedMap struct {
	keys []string
	m    map[string]any
}

func (o orderedMap) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(o.m[k])
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

// WriteSynthetic writes a synthetic catalogue of n products in the original's
// file format to dir (items_shuffle_synth.json, items_ins_v2_synth.json,
// items_human_ins.json, reviews_synth.json) and returns the file names.
func WriteSynthetic(dir string, n int, seed int64) (Files, error) {
	sf := generateSynthetic(n, seed)
	f := Files{
		Products: filepath.Join(dir, "items_shuffle_synth.json"),
		Attrs:    filepath.Join(dir, "items_ins_v2_synth.json"),
		Human:    filepath.Join(dir, "items_human_ins.json"),
		Reviews:  filepath.Join(dir, "reviews_synth.json"),
	}
	for path, v := range map[string]any{f.Products: sf.products, f.Attrs: sf.attrs, f.Human: sf.human, f.Reviews: sf.reviews} {
		b, err := json.Marshal(v)
		if err != nil {
			return f, err
		}
		if err := safefile.WriteFile(path, b, 0o644); err != nil {
			return f, err
		}
	}
	return f, nil
}

// syntheticRaw produces the decoded raw data of a synthetic catalogue through
// the same JSON round trip as the files (the loader code path is shared).
func syntheticRaw(n int, seed int64) (*rawData, error) {
	sf := generateSynthetic(n, seed)
	rd := &rawData{}
	for _, v := range []struct {
		src any
		dst any
	}{{sf.products, &rd.products}, {sf.attrs, &rd.attrs}, {sf.human, &rd.human}, {sf.reviews, &rd.reviews}} {
		b, err := json.Marshal(v.src)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, v.dst); err != nil {
			return nil, err
		}
	}
	return rd, nil
}
