package webshop

// The original shuffles its goal list once with Python's random.seed(233)
// followed by random.shuffle. Reproducing Python's Mersenne Twister and its
// shuffle keeps "goal N" pointing at the same list position as the original
// for a goal list of the same length and order.

const mtN = 624

type pyRandom struct {
	mt  [mtN]uint32
	mti int
}

func (r *pyRandom) initGenrand(s uint32) {
	r.mt[0] = s
	for i := 1; i < mtN; i++ {
		r.mt[i] = 1812433253*(r.mt[i-1]^(r.mt[i-1]>>30)) + uint32(i)
	}
	r.mti = mtN
}

func (r *pyRandom) initByArray(key []uint32) {
	r.initGenrand(19650218)
	i, j := 1, 0
	k := max(mtN, len(key))
	for ; k > 0; k-- {
		r.mt[i] = (r.mt[i] ^ ((r.mt[i-1] ^ (r.mt[i-1] >> 30)) * 1664525)) + key[j] + uint32(j)
		i++
		j++
		if i >= mtN {
			r.mt[0] = r.mt[mtN-1]
			i = 1
		}
		if j >= len(key) {
			j = 0
		}
	}
	for k = mtN - 1; k > 0; k-- {
		r.mt[i] = (r.mt[i] ^ ((r.mt[i-1] ^ (r.mt[i-1] >> 30)) * 1566083941)) - uint32(i)
		i++
		if i >= mtN {
			r.mt[0] = r.mt[mtN-1]
			i = 1
		}
	}
	r.mt[0] = 0x80000000
}

// newPyRandom seeds like Python's random.seed(n) for a non-negative int n.
func newPyRandom(seed uint64) *pyRandom {
	r := &pyRandom{}
	key := []uint32{uint32(seed)}
	if hi := uint32(seed >> 32); hi != 0 {
		key = append(key, hi)
	}
	r.initByArray(key)
	return r
}

func (r *pyRandom) uint32() uint32 {
	if r.mti >= mtN {
		for kk := 0; kk < mtN; kk++ {
			y := (r.mt[kk] & 0x80000000) | (r.mt[(kk+1)%mtN] & 0x7fffffff)
			v := r.mt[(kk+397)%mtN] ^ (y >> 1)
			if y&1 != 0 {
				v ^= 0x9908b0df
			}
			r.mt[kk] = v
		}
		r.mti = 0
	}
	y := r.mt[r.mti]
	r.mti++
	y ^= y >> 11
	y ^= (y << 7) & 0x9d2c5680
	y ^= (y << 15) & 0xefc60000
	y ^= y >> 18
	return y
}

// randBelow is Python's _randbelow_with_getrandbits for n < 2^32.
func (r *pyRandom) randBelow(n int) int {
	k := 0
	for v := n; v > 0; v >>= 1 {
		k++
	}
	for {
		v := int(r.uint32() >> (32 - k))
		if v < n {
			return v
		}
	}
}

// shuffle permutes n elements with swap as Python's random.shuffle does.
func (r *pyRandom) shuffle(n int, swap func(i, j int)) {
	for i := n - 1; i > 0; i-- {
		j := r.randBelow(i + 1)
		swap(i, j)
	}
}
