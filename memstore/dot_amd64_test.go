package memstore

func useAVX2Kernel() bool { return useAVX2 }
