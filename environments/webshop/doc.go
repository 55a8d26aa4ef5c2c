// Package webshop is a native Go reimplementation of the WebShop environment
// (Yao et al., 2022) in its text mode: a simulated web shop in which an agent
// reads an instruction ("i need a long lasting lipstick in red, and price
// lower than 30.00 dollars"), searches the catalogue, opens products, picks
// their options and buys one. The reward of the purchase is the original's
// current goal.py, bug for bug: a product-type factor times the fraction of
// matched attributes, goal options and the price bound, with thefuzz
// 0.19.0's token_set_ratio over difflib (fuzz.go) and synthetic goal
// options compared as Python (name, value) tuples (Options.Extra
// reward=fixed corrects that colour asymmetry). Success is reward 1.0.
//
// The package reads the original's data files (items_shuffle*.json,
// items_ins_v2*.json, items_human_ins.json, optionally reviews*.json) from a
// directory, or builds a deterministic synthetic catalogue in the same format
// (the default, and what the tests use). Search is the original's Lucene
// index re-expressed in Go (lucene.go, search.go): Anserini's English
// analyzer (StandardTokenizer, possessive and stop-word filters, Porter
// stemmer), Lucene 8's BM25 (k1 0.9, b 0.4) in float32 with one-byte
// document-length norms, ties broken by ASIN. Ratings and reviews are not
// shown (the original's load_products no longer loads them) unless
// reviews=keep. Pages are rendered as the original's "simple" text
// observations of its text-mode-era templates, with " [SEP] " between the
// visible texts. Actions are parsed as the original's step (case and blanks
// matter; actions=lenient relaxes that): search[...] runs from any page,
// click[...] needs a clickable of the page, and anything else earns 0 and
// leaves the page as it is. The episode ends at the purchase.
//
// It registers itself under the name "webshop" in the environments registry:
// import it for its side effect. One task, "webshop"; a variation is a goal
// index (test = the first 500 goals, train = the rest). See docs/webshop.md
// for the deviations from the original.
package webshop
