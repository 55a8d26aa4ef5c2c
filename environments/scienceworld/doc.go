// Package scienceworld drives the real ScienceWorld simulator (Apache-2.0;
// a 1.3.x jar with py4j's Java side on its class path: the one inside the
// `scienceworld` Python package, or one built from the simulator's public
// source) from Go, with no Python: each Env starts its own JVM running
// py4j's GatewayServer on an ephemeral 127.0.0.1 port, constructs
// scienceworld.runtime.pythonapi.PythonInterface and speaks py4j's text
// protocol over TCP. The JVM's stdout (debug text on every step) is drained;
// it exits when its stdin closes, so it cannot outlive this process; every
// call has a deadline, and a dead or hung JVM is ErrSimulatorDied, never a
// hang.
//
// The semantics reproduce the official Python wrapper (scienceworld.py):
// Reset = load then "look around"; score = round(100 ×
// getScore()); reward = score change; done = completed, score < 0, or moves
// > step limit. The task table (30 tasks), the train/dev/test split rule and
// the EMPO² per-task step limits are local, so listing tasks needs no jar.
// Optional: action correction (Options.Extra correct_actions=jaccard), the
// Python wrapper's full info dict (info=full), java launcher, heap and
// timeouts (see the Extra* constants).
//
// The jar comes from Options.Jar or $SCIENCEWORLD_JAR; docs/environments.md
// says what is needed and gives the figures measured on the real simulator
// (v1.3.0 built from source: gold paths of all 30 tasks at variation 0
// reach 100; the bridge steps 140–229 times a second on power-component).
package scienceworld
