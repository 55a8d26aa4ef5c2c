// The sampler's full-vocabulary passes in C (sample.h; sampler.go owns the
// draw). Every number is computed as the Go reference did it, so a seed
// draws the same tokens as before:
//
//   - expneg(x) is sampler.go's former expNeg, operation for operation (no
//     fused multiply-add in this file, as Go on amd64 v1: the pragmas below,
//     since cgo refuses -ffp-contract as a flag); it is written with GCC/Clang
//     vector types, 8 doubles at a time, and its two integer steps in forms
//     that are exact over the range used: trunc(y) for y <= 0 as a rounding
//     by the 1.5·2^52 bias then +1 where that went below y, and 2^k as k +
//     1023 moved into the exponent field;
//   - sums are float64, in index order (the terms are computed in blocks,
//     then added one by one: the order is the reference's);
//   - the draw's running sums are stored (pre[i] = e_0 + … + e_i, the
//     reference's c after token i), so finding the first i with u < c is a
//     binary search instead of a second scan.
//
// The max pass reports NaN logits (the reference's sum became NaN and the
// sampler failed); expneg itself maps NaN to 0, the caller checks the flag.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi" // 64-byte vectors without AVX-512: internal functions only
#endif
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "sample.h"

typedef double v8d __attribute__((vector_size(64)));
typedef int64_t v8l __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

#define LOG2E 1.4426950408889634
#define LN2HI 6.93147180369123816490e-01
#define LN2LO 1.90821492927058770002e-10

static inline __attribute__((always_inline)) v8d expneg8(v8d x0) {
	const v8d lo = {-709, -709, -709, -709, -709, -709, -709, -709};
	v8l ok = x0 >= -708; // all ones where the reference computes, else 0 (also NaN)
	v8d x = (v8d) (((v8l) x0 & ok) | ((v8l) lo & ~ok));
	v8d y = x * LOG2E - 0.5;
	// Go: float64(int64(y)), y in [-1023, 0): truncation toward zero = ceil
	v8d rn = (y + 0x1.8p52) - 0x1.8p52;             // round to nearest
	v8d k = rn - __builtin_convertvector(rn < y, v8d); // (rn < y) is -1 where rn is below y
	v8d r = x - k * LN2HI - k * LN2LO;
	v8d p = 1 + r * (1 + r * (1.0 / 2 + r * (1.0 / 6 + r * (1.0 / 24 + r * (1.0 / 120 + r * (1.0 / 720 + r * (1.0 / 5040 + r * (1.0 / 40320))))))));
	v8d s = (v8d) ((v8l) (k + (1023.0 + 0x1p52)) << 52); // 2^k: k + 1023 in the low mantissa bits, moved up
	return (v8d) ((v8l) (p * s) & ok);
}

// scalar twin for tails (the same operations, one lane)
static inline double expneg1(double x) {
	v8d v = {x, x, x, x, x, x, x, x};
	return expneg8(v)[0];
}

double empo2_expneg(double x) {
	if (x != x) {
		return x;
	}
	return expneg1(x);
}

void empo2_expneg_many(const double * x, double * e, int n) {
	int i = 0;
	for (; i + 8 <= n; i += 8) {
		v8d v;
		memcpy(&v, x + i, sizeof v);
		v = expneg8(v);
		memcpy(e + i, &v, sizeof v);
	}
	for (; i < n; i++) {
		e[i] = expneg1(x[i]);
	}
}

int empo2_row_max(const float * l, int n, float * mx, int * arg) {
	// Go: if l > mx { mx, arg = l, i } from -Inf, arg 0 (NaNs are skipped)
	const v8f ninf = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
	v8f m8 = ninf;
	v8i nan8 = {0};
	int i = 0;
	for (; i + 8 <= n; i += 8) {
		v8f v;
		memcpy(&v, l + i, sizeof v);
		v8i gt = v > m8;
		m8 = (v8f) (((v8i) v & gt) | ((v8i) m8 & ~gt));
		nan8 |= v != v;
	}
	float m = -INFINITY;
	int nan = 0;
	for (int j = 0; j < 8; j++) {
		m = m8[j] > m ? m8[j] : m;
		nan |= nan8[j] != 0;
	}
	for (; i < n; i++) {
		m = l[i] > m ? l[i] : m;
		nan |= l[i] != l[i];
	}
	int a = 0;
	if (m > -INFINITY) {
		while (!(l[a] == m)) {
			a++;
		}
	}
	*mx = m;
	*arg = a;
	return nan;
}

#define BLOCK 512

// terms writes e[j] = expneg(((double) l[j] - m) * inv) for j < nb.
static void terms(const float * l, int nb, double m, double inv, double * e) {
	int j = 0;
	for (; j + 8 <= nb; j += 8) {
		v8f f;
		memcpy(&f, l + j, sizeof f);
		v8d x = expneg8((__builtin_convertvector(f, v8d) - m) * inv);
		memcpy(e + j, &x, sizeof x);
	}
	for (; j < nb; j++) {
		e[j] = expneg1(((double) l[j] - m) * inv);
	}
}

double empo2_softmax_prefix(const float * l, int n, double inv, double * pre, float * mx_out, int * arg_out, double * sum_t) {
	float mx;
	int arg;
	int nan = empo2_row_max(l, n, &mx, &arg);
	*mx_out = mx;
	*arg_out = arg;
	if (sum_t != 0) {
		*sum_t = 0;
	}
	if (nan) {
		return NAN;
	}
	const double m = (double) mx;
	double e[BLOCK];
	double sum1 = 0;
	double c = 0;
	for (int i0 = 0; i0 < n; i0 += BLOCK) {
		int nb = n - i0 < BLOCK ? n - i0 : BLOCK;
		const float * lb = l + i0;
		terms(lb, nb, m, 1, e);
		if (pre != 0 && inv == 1) {
			double * pb = pre + i0;
			for (int j = 0; j < nb; j++) {
				sum1 += e[j];
				pb[j] = sum1;
			}
			continue;
		}
		for (int j = 0; j < nb; j++) {
			sum1 += e[j];
		}
		if (pre != 0) {
			terms(lb, nb, m, inv, e);
			double * pb = pre + i0;
			for (int j = 0; j < nb; j++) {
				c += e[j];
				pb[j] = c;
			}
		}
	}
	if (sum_t != 0 && pre != 0) {
		*sum_t = inv == 1 ? sum1 : c;
	}
	return sum1;
}

int empo2_search_prefix(const double * pre, int n, double u) {
	int lo = 0, hi = n;
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		if (u < pre[mid]) {
			hi = mid;
		} else {
			lo = mid + 1;
		}
	}
	return lo;
}
