// The per-row loops of the fused additive attention kernel (additive_kernel.cpp), written once and compiled once
// per instruction set: the includer defines, before each inclusion,
//   ADDITIVE_NS      the namespace of this copy (avx512, avx2, generic, generic_double)
//   ADDITIVE_SCALAR  float or double
//   ADDITIVE_VEC     the vector type: a GCC vector of W scalars, or the scalar itself (W = 1)
//   ADDITIVE_IVEC    (W > 1) the vector of W int32 of the same size
//   ADDITIVE_W       lanes per vector
// inside a `#pragma GCC target` region for the vector copies; the end of this file undefines them. No header is
// included here: everything is plain arithmetic on raw pointers, so each copy is compiled for its own instruction
// set only.
//
// tanh of a query row's d_a × Lk pre-activations goes, when the caller passes one, through an array routine
// (MKL's vsTanh, what torch.tanh calls: about 1.5× the rate of the inline formula here); otherwise through
// `tanh_vec`, inline: tanh|x| = 1 − 2/(e^{2|x|} + 1) with e^y = 2^k·p(r) (Cody–Waite reduction, degree-7 Taylor
// p), and the odd Taylor series to x¹³ below |x| = 0.3, where the first form loses digits to cancellation
// (measured: within 8e-8 absolute and 2e-7 relative of float64 tanh on [−12, 12]).
//
// Layout of one (batch, head) pair, prepared by the caller:
//   a     Lq × d_a   the projected queries W_q q (row i at a + i·d_a)
//   bT    d_a × nvp  the projected keys W_k k of the nv non-padding keys, transposed; columns nv..nvp-1 are zero
//                    (nvp = nv rounded up to a multiple of W), so every key loop runs over whole vectors
//   vc    nv × D     the values of the nv non-padding keys
//   w     d_a        the score vector v
// Scores of query i: s_j = Σ_c w_c tanh(a_ic + bT_cj) (Bahdanau et al. 2015, A.1.2), vectorised over keys j.

namespace ADDITIVE_NS {

using scalar = ADDITIVE_SCALAR;
using vec = ADDITIVE_VEC;
constexpr long W = ADDITIVE_W;

static inline vec load(const scalar* p) {
  vec v;
  __builtin_memcpy(&v, p, sizeof(vec));
  return v;
}
static inline void store(scalar* p, vec v) { __builtin_memcpy(p, &v, sizeof(vec)); }
static inline vec broadcast(scalar x) { return vec{} + x; }

#if ADDITIVE_W > 1
using ivec = ADDITIVE_IVEC;
// e^y for y in [−87, 88] (clamped), about 1 ulp: y = k·ln2 + r, |r| ≤ ln2/2, e^y = 2^k·Σ_{n≤7} rⁿ/n!.
static inline vec exp_vec(vec y) {
  y = y < -87.0f ? broadcast(-87.0f) : y;
  y = y > 88.0f ? broadcast(88.0f) : y;
  const vec kf = y * 1.44269504088896341f + (vec)(y < 0 ? broadcast(-0.5f) : broadcast(0.5f));
  const ivec k = __builtin_convertvector(kf, ivec);  // truncation: the nearest integer to y·log2(e)
  const vec kr = __builtin_convertvector(k, vec);
  vec r = y - kr * 0.693359375f;  // ln2 split in two (Cody & Waite 1980) so kr·ln2_hi is exact
  r = r + kr * 2.12194440e-4f;
  vec p = broadcast(1.0f / 5040);
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const ivec bits = (k + 127) << 23;
  vec two_k;
  __builtin_memcpy(&two_k, &bits, sizeof(vec));
  return p * two_k;
}
static inline vec tanh_vec(vec x) {
  vec ax = x < 0 ? -x : x;
  ax = ax > 9.0f ? broadcast(9.0f) : ax;  // tanh(9) rounds to 1 in float32
  const vec large = 1.0f - 2.0f / (exp_vec(ax + ax) + 1.0f);
  const vec x2 = ax * ax;
  vec q = broadcast(21844.0f / 6081075);
  q = q * x2 - 1382.0f / 155925;
  q = q * x2 + 62.0f / 2835;
  q = q * x2 - 17.0f / 315;
  q = q * x2 + 2.0f / 15;
  q = q * x2 - 1.0f / 3;
  const vec small = ax + ax * x2 * q;
  const vec t = ax < 0.3f ? small : large;
  return x < 0 ? -t : t;
}
#else
static inline vec exp_vec(vec y) { return __builtin_exp(y); }
static inline vec tanh_vec(vec x) { return __builtin_tanh(x); }
#endif

static inline scalar hsum(vec v) {
  scalar total = 0;
  const scalar* lanes = reinterpret_cast<const scalar*>(&v);
  for (long l = 0; l < W; ++l) total += lanes[l];
  return total;
}

// An array tanh, out[0..n) = tanh(in[0..n)) (MKL's vsTanh signature), or nullptr for the inline formula.
using tanh_array_fn = void (*)(int, const scalar*, scalar*);

// s[0..nvp) = Σ_c w_c tanh(a_i[c] + bT[c, :]), and the tanh values into t (d_a × nvp).
static inline void score_row(const scalar* a_i, const scalar* bT, const scalar* w, long d_a, long nvp, scalar* s,
                             scalar* t, tanh_array_fn tanh_array) {
  for (long j = 0; j < nvp; j += W) store(s + j, vec{});
  if (tanh_array) {
    // hidden units in groups of about 4096 pre-activations (16 KiB of float32), so each group stays in L1
    // between the add, the array tanh and the weighted sum
    const long group = nvp >= 4096 ? 1 : 4096 / nvp;
    for (long c0 = 0; c0 < d_a; c0 += group) {
      const long c1 = c0 + group < d_a ? c0 + group : d_a;
      for (long c = c0; c < c1; ++c) {
        const vec x = broadcast(a_i[c]);
        for (long j = 0; j < nvp; j += W) store(t + c * nvp + j, x + load(bT + c * nvp + j));
      }
      tanh_array(static_cast<int>((c1 - c0) * nvp), t + c0 * nvp, t + c0 * nvp);
      for (long c = c0; c < c1; ++c) {
        const vec wc = broadcast(w[c]);
        for (long j = 0; j < nvp; j += W) store(s + j, load(s + j) + wc * load(t + c * nvp + j));
      }
    }
    return;
  }
  for (long c = 0; c < d_a; ++c) {
    const vec x = broadcast(a_i[c]), wc = broadcast(w[c]);
    const scalar* row = bT + c * nvp;
    for (long j = 0; j < nvp; j += W) {
      const vec th = tanh_vec(x + load(row + j));
      store(t + c * nvp + j, th);
      store(s + j, load(s + j) + wc * th);
    }
  }
}

// p_j = exp(s_j - shift) in place for j < nv, zero for the padding lanes; returns Σ_j p_j.
static inline scalar exp_row(scalar* s, long nv, long nvp, scalar shift) {
  const vec sh = broadcast(shift);
  for (long j = 0; j < nvp; j += W) store(s + j, exp_vec(load(s + j) - sh));
  for (long j = nv; j < nvp; ++j) s[j] = 0;
  scalar total = 0;
  for (long j = 0; j < nv; ++j) total += s[j];
  return total;
}

// Forward of queries [i0, i1): out_i = softmax(s_i) · vc (D), lse_i = log Σ_j exp(s_ij). s: nvp scratch,
// t: d_a × nvp scratch.
void forward_rows(const scalar* a, long i0, long i1, long d_a, const scalar* bT, const scalar* vc, long nv, long nvp,
                  long D, const scalar* w, scalar* out, scalar* lse, scalar* s, scalar* t, tanh_array_fn tanh_array) {
  for (long i = i0; i < i1; ++i) {
    score_row(a + i * d_a, bT, w, d_a, nvp, s, t, tanh_array);
    scalar m = s[0];
    for (long j = 1; j < nv; ++j) m = s[j] > m ? s[j] : m;
    const scalar l = exp_row(s, nv, nvp, m);
    scalar* o = out + i * D;
    for (long d = 0; d < D; ++d) o[d] = 0;
    for (long j = 0; j < nv; ++j) {
      const scalar p = s[j];
      const scalar* vj = vc + j * D;
#pragma omp simd
      for (long d = 0; d < D; ++d) o[d] += p * vj[d];
    }
    const scalar inv = scalar(1) / l;
#pragma omp simd
    for (long d = 0; d < D; ++d) o[d] *= inv;
    lse[i] = m + __builtin_log(static_cast<double>(l));
  }
}

// Backward of all Lq queries of one (batch, head), accumulating over queries (Dao et al. 2022, FlashAttention,
// Alg. 4, with the score's own chain rule): with P = softmax(s), dP_ij = dO_i·v_j, dS_ij = P_ij (dP_ij − dO_i·O_i),
//   dv_j += P_ij dO_i;  g_ijc = dS_ij w_c (1 − t_ijc²);  da_ic = Σ_j g_ijc;  dbT_cj += g_ijc;  dw_c += Σ_ij dS_ij t_ijc.
// The tanh values t of one query row are recomputed (one tanh per pair and hidden unit) into the d_a × nvp
// scratch t, never stored across rows. s, ds: nvp scratch. da (Lq × d_a), dbT (d_a × nvp), dvc (nv × D) and
// dw (d_a) are accumulated into (zeroed by the caller).
void backward_rows(const scalar* a, long Lq, long d_a, const scalar* bT, const scalar* vc, long nv, long nvp, long D,
                   const scalar* w, const scalar* out, const scalar* dout, const scalar* lse, scalar* da, scalar* dbT,
                   scalar* dvc, scalar* dw, scalar* s, scalar* ds, scalar* t, tanh_array_fn tanh_array) {
  for (long i = 0; i < Lq; ++i) {
    const scalar* o = out + i * D;
    const scalar* dO = dout + i * D;
    scalar delta = 0;
    for (long d = 0; d < D; ++d) delta += dO[d] * o[d];
    score_row(a + i * d_a, bT, w, d_a, nvp, s, t, tanh_array);
    exp_row(s, nv, nvp, lse[i]);  // s now holds P_i·
    for (long j = 0; j < nv; ++j) {
      const scalar p = s[j];
      const scalar* vj = vc + j * D;
      scalar* dvj = dvc + j * D;
      scalar dp = 0;
#pragma omp simd reduction(+ : dp)
      for (long d = 0; d < D; ++d) {
        dp += dO[d] * vj[d];
        dvj[d] += p * dO[d];
      }
      ds[j] = p * (dp - delta);
    }
    for (long j = nv; j < nvp; ++j) ds[j] = 0;
    scalar* da_i = da + i * d_a;
    for (long c = 0; c < d_a; ++c) {
      const vec wc = broadcast(w[c]), one = broadcast(scalar(1));
      const scalar* tc = t + c * nvp;
      scalar* dbc = dbT + c * nvp;
      vec g_sum{}, w_sum{};
      for (long j = 0; j < nvp; j += W) {
        const vec th = load(tc + j), dsj = load(ds + j);
        const vec g = dsj * wc * (one - th * th);
        store(dbc + j, load(dbc + j) + g);
        g_sum += g;
        w_sum += dsj * th;
      }
      da_i[c] += hsum(g_sum);
      dw[c] += hsum(w_sum);
    }
  }
}

}  // namespace ADDITIVE_NS

#undef ADDITIVE_NS
#undef ADDITIVE_SCALAR
#undef ADDITIVE_VEC
#undef ADDITIVE_IVEC
#undef ADDITIVE_W
