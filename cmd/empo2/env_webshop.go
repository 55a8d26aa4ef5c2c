package main

// Registers the native WebShop environment ("webshop") with the environment
// registry, so `empo2 env list|play|gold` can use it.
import _ "github.com/empo2/empo2/environments/webshop"
