package gguf

import "math"

// F32ToF16 converts a float32 to IEEE 754 binary16 bits, rounding to nearest
// even. Values too large become ±Inf, NaN stays NaN (quiet, payload top bits
// kept), tiny values become subnormals or ±0.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff

	if exp == 0xff { // Inf or NaN
		if mant == 0 {
			return sign | 0x7c00
		}
		m := uint16(mant >> 13)
		return sign | 0x7c00 | 0x0200 | m // force quiet bit so it stays a NaN
	}
	// unbiased exponent
	e := exp - 127
	if e > 15 {
		return sign | 0x7c00 // overflow → Inf
	}
	if e >= -14 {
		// normal half: 10-bit mantissa, round to nearest even on the 13 dropped bits
		hm := mant >> 13
		rest := mant & 0x1fff
		he := uint32(e + 15)
		v := he<<10 | hm
		if rest > 0x1000 || (rest == 0x1000 && hm&1 == 1) {
			v++ // may carry into the exponent, up to Inf: correct behaviour
		}
		return sign | uint16(v)
	}
	// subnormal half (or zero). Half subnormal value = m * 2^-24.
	if e < -25 {
		return sign // underflow to ±0 (even 2^-25 exactly rounds to 0 under RNE; handled below)
	}
	// full significand with implicit bit (float32 normal) or without (float32 subnormal → e<-25 anyway)
	sig := mant | 0x800000 // value = sig * 2^(e-23)
	// want m = value / 2^-24 = sig * 2^(e-23+24) = sig * 2^(e+1); e+1 in [-24,-14] → right shift by -(e+1)
	shift := uint32(-(e + 1))
	m := sig >> shift
	rest := sig & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rest > half || (rest == half && m&1 == 1) {
		m++ // may become the smallest normal (0x0400): correct
	}
	return sign | uint16(m)
}

// F16ToF32 converts IEEE 754 binary16 bits to a float32 (exact).
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // Inf/NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// subnormal: normalize
		e := int32(-14)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		mant &= 0x3ff
		return math.Float32frombits(sign | uint32(e+127)<<23 | mant<<13)
	default:
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	}
}
