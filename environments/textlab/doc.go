// Package textlab is a small native world in the style of ScienceWorld, for
// tests and CPU experiments without a JVM: ten rooms joined by doors that
// open and close, furniture that holds things, an inventory, heat sources
// and coolers that change substances' state of matter, batteries, wires and
// light bulbs, thermometers — driven by a subset of ScienceWorld's action
// grammar (look around, go to, open/close, pick up, put down, move X to Y /
// put X in Y, connect X to Y, disconnect, activate/deactivate, focus on,
// look at, use X on Y, inventory, wait, wait1, teleport to under the
// teleportAction simplification).
//
// Six task families are procedurally varied (which object, where it hides,
// which box, which colours): find-living-thing, light-bulb, melt and
// use-thermometer for training, and boil and freeze held out
// (Task.HeldOut) for out-of-distribution tests. Every success needs visiting
// rooms the agent starts without seeing. Scores run 0–100 with partial
// credit for milestones; focusing on a wrong object (or sorting into the
// wrong box) ends the episode at −100. Every variation has a gold action
// sequence (environments.GoldProvider) computed by playing a scripted plan
// on a private copy of the world.
//
// The world is a pure function of (task, variation): it has no random
// dynamics, so the reset seed is accepted and ignored, and gold paths are
// valid for every seed. Register name: "textlab".
package textlab
