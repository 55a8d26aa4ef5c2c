// Package statefile is the training-state file format: the names a state
// file's GGUF keys and tensors carry. trainer/optim writes and reads the
// files (Save, Load, SaveFull, LoadFull); `empo2 export` reads the adapter
// inside one. Pure Go, no cgo: a reader of the format does not link the
// training graph.
//
// A LoRA state file is one GGUF holding:
//
//   - the adapter exactly as in an adapter file (general.architecture,
//     adapter.type = "lora", adapter.lora.alpha, "<W>.lora_a" / "<W>.lora_b"
//     F32 tensors), except general.type = GeneralType so that nobody
//     mistakes it for a plain adapter (llama.cpp refuses it with "expect
//     general.type to be 'adapter'"; `empo2 export` extracts the adapter);
//   - the AdamW moments as F32 tensors "<W>.lora_a" + SuffixM / SuffixV and
//     "<W>.lora_b" + SuffixM / SuffixV;
//   - metadata: KeyVersion (u32), KeyStep (i64, updates done),
//     empo2.adamw.{steps (i64), beta1, beta2, eps, weight_decay (f64)},
//     empo2.schedule.{kind (str), base_lr, min_lr (f64), warmup, total
//     (i64)}, KeyRNG (u8 array: math/rand/v2 PCG MarshalBinary, absent when
//     there is no RNG) and any string in Meta as KeyMetaPrefix + key.
//
// A full-SFT state file has general.type = FullGeneralType, the same
// metadata keys, and per parameter the F32 tensors "<name>", "<name>" +
// SuffixM and "<name>" + SuffixV.
package statefile

import "strings"

// General types and the format version.
const (
	GeneralType     = "empo2.train_state"      // general.type of a LoRA state file
	FullGeneralType = "empo2.full_train_state" // general.type of a full-SFT state file
	Version         = 1                        // KeyVersion written
)

// Metadata keys.
const (
	KeyVersion    = "empo2.state.version"
	KeyStep       = "empo2.state.step"
	KeyAdamSteps  = "empo2.adamw.steps"
	KeyAdamBeta1  = "empo2.adamw.beta1"
	KeyAdamBeta2  = "empo2.adamw.beta2"
	KeyAdamEps    = "empo2.adamw.eps"
	KeyAdamWD     = "empo2.adamw.weight_decay"
	KeySchedKind  = "empo2.schedule.kind"
	KeySchedBase  = "empo2.schedule.base_lr"
	KeySchedMin   = "empo2.schedule.min_lr"
	KeySchedWarm  = "empo2.schedule.warmup"
	KeySchedTotal = "empo2.schedule.total"
	KeyRNG        = "empo2.rng"
	KeyMetaPrefix = "empo2.meta."
)

// Tensor name suffixes of the AdamW moments.
const (
	SuffixM = ".adam_m" // first moment
	SuffixV = ".adam_v" // second moment
)

// IsMoment reports whether a state file's tensor name is an AdamW moment
// (not a weight).
func IsMoment(name string) bool {
	return strings.HasSuffix(name, SuffixM) || strings.HasSuffix(name, SuffixV)
}
