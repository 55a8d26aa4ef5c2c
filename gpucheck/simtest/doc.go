// Package simtest runs the device code paths of the training engine and of
// the GPU checks on llama's host-memory stand-in for a GPU
// (llama.RegisterSimDevice): the same graphs split between a device and the
// CPU, with the same copies, as on a real GPU, computed by the CPU kernels
// so that every value must equal the CPU engine's exactly. Its tests live
// in a package of their own because the registration lasts for the whole
// process (the other packages' tests expect "gpu" to fail and "auto" to
// fall back to the CPU on a machine without a GPU).
package simtest
