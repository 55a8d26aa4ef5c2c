// Package webshop is a native Go reimplementation of the WebShop environment
// (Yao et al., 2022) in its text mode: a simulated web shop in which an agent
// reads an instruction ("i need a long lasting lipstick in red, and price
// lower than 30.00 dollars"), searches the catalogue, opens products, picks
// their options and buys one. The reward of the purchase follows the
// original's goal.py: a product-type factor times the fraction of matched
// attributes, options and the price bound.
//
// The package reads the original's data files (items_shuffle*.json,
// items_ins_v2*.json, items_human_ins.json, optionally reviews*.json) from a
// directory, or builds a deterministic synthetic catalogue in the same format
// (the default, and what the tests use). Search is BM25 (k1 0.9, b 0.4, as
// the original's Pyserini/Lucene index) computed from the term statistics of
// an in-memory SQLite FTS4 index with the porter tokenizer; no build tag is
// needed. Pages are rendered as the original's "simple" text observations
// of its text-mode-era templates, with " [SEP] " between the visible texts.
// As in the original's step, search[...] runs from any page, click[...]
// needs a clickable of the page, and anything else earns 0 and leaves the
// page as it is.
//
// It registers itself under the name "webshop" in the environments registry:
// import it for its side effect. One task, "webshop"; a variation is a goal
// index (test = the first 500 goals, train = the rest). See docs/webshop.md
// for the deviations from the original.
package webshop
