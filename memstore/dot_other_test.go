//go:build !amd64

package memstore

func useAVX2Kernel() bool { return false }
