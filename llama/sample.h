// sample.c: the sampler's full-vocabulary passes (see sampler.go).
#pragma once

// empo2_expneg is exp(x) for x <= 0, bit for bit the Go reference's expNeg.
double empo2_expneg(double x);

// empo2_expneg_many: e[i] = empo2_expneg(x[i]) through the vector code
// (NaN gives 0 there; the row functions check NaN first). For tests.
void empo2_expneg_many(const double * x, double * e, int n);

// empo2_row_max: the largest of n logits and the index of its first
// occurrence (NaNs skipped; all NaN or -Inf: -Inf and 0); returns whether
// a logit is NaN.
int empo2_row_max(const float * l, int n, float * mx, int * arg);

// empo2_softmax_prefix returns sum_i expneg(l_i - mx) (float64, index
// order; NaN when a logit is NaN) and stores mx and its first index. When pre is not null it also
// stores pre[i] = sum_{j<=i} expneg((l_j - mx) * inv) (the draw's running
// sums at temperature 1/inv) and their total in *sum_t.
double empo2_softmax_prefix(const float * l, int n, double inv, double * pre, float * mx, int * arg, double * sum_t);

// empo2_search_prefix: the first i with u < pre[i] (pre nondecreasing), n
// when there is none.
int empo2_search_prefix(const double * pre, int n, double u);
