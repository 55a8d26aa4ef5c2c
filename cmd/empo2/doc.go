// Command empo2 is the command-line front end. Conventions: one file per
// top-level command, each registering itself with register() from init;
// flags are package variables; actions return errors (never os.Exit); logging
// is configured in the app's Before hook. The command only wires packages
// together: no algorithm lives here.
package main
