// Fused additive attention on CPU, forward and backward (attnbench.attention.cpu_kernels.additive_attention).
//
// out_i = Σ_j softmax_j(s_ij) v_j with s_ij = wᵀ tanh(a_i + b_j), a = W_q q and b = W_k k precomputed (GEMMs).
// Each task holds one (batch, head)'s keys transposed (d_a × Lk, padding keys dropped) and its values, and
// streams every query row over them: one row of Lk scores (and, in the backward, that row's d_a × Lk tanh
// values) is the most it stores, so memory is O(B·H·L·(d_a + d)) beside the inputs, never O(L²·d_a).
// The row loops (additive_kernel_rows.h) are compiled for AVX-512, AVX2+FMA and plain C++, picked at run time;
// tanh is MKL's vsTanh (what torch.tanh calls) where libtorch_cpu exports it, else the loops' inline formula.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#define ADDITIVE_X86 1
#else
#define ADDITIVE_X86 0
#endif

// MKL's array tanh, the routine torch.tanh calls on float32 CPU tensors; libtorch_cpu exports it where torch was
// built with MKL. Weak: null elsewhere, and the row loops use their inline tanh.
extern "C" void vsTanh(int n, const float* in, float* out) __attribute__((weak));

// ---- the row loops, once per instruction set -------------------------------------------------------------------
#if ADDITIVE_X86
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,fma")
typedef float additive_vf16 __attribute__((vector_size(64)));
typedef int additive_vi16 __attribute__((vector_size(64)));
#define ADDITIVE_NS avx512
#define ADDITIVE_SCALAR float
#define ADDITIVE_VEC additive_vf16
#define ADDITIVE_IVEC additive_vi16
#define ADDITIVE_W 16
#include "additive_kernel_rows.h"
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
typedef float additive_vf8 __attribute__((vector_size(32)));
typedef int additive_vi8 __attribute__((vector_size(32)));
#define ADDITIVE_NS avx2
#define ADDITIVE_SCALAR float
#define ADDITIVE_VEC additive_vf8
#define ADDITIVE_IVEC additive_vi8
#define ADDITIVE_W 8
#include "additive_kernel_rows.h"
#pragma GCC pop_options
#endif

#define ADDITIVE_NS generic
#define ADDITIVE_SCALAR float
#define ADDITIVE_VEC float
#define ADDITIVE_W 1
#include "additive_kernel_rows.h"

#define ADDITIVE_NS generic_double
#define ADDITIVE_SCALAR double
#define ADDITIVE_VEC double
#define ADDITIVE_W 1
#include "additive_kernel_rows.h"

namespace {

template <typename scalar>
using tanh_array_fn = void (*)(int, const scalar*, scalar*);
template <typename scalar>
using forward_fn = void (*)(const scalar*, long, long, long, const scalar*, const scalar*, long, long, long,
                            const scalar*, scalar*, scalar*, scalar*, scalar*, tanh_array_fn<scalar>);
template <typename scalar>
using backward_fn = void (*)(const scalar*, long, long, const scalar*, const scalar*, long, long, long, const scalar*,
                             const scalar*, const scalar*, const scalar*, scalar*, scalar*, scalar*, scalar*, scalar*,
                             scalar*, scalar*, tanh_array_fn<scalar>);

// The row loops for this CPU: lanes, forward, backward, and the array tanh (nullptr: the loops' inline tanh).
template <typename scalar>
struct RowLoops {
  long lanes;
  forward_fn<scalar> forward;
  backward_fn<scalar> backward;
  tanh_array_fn<scalar> tanh_array;
};

// ATTNBENCH_ADDITIVE_TANH=inline makes the float32 loops use their own tanh even where MKL's is available.
tanh_array_fn<float> float_tanh_array() {
  const char* choice = std::getenv("ATTNBENCH_ADDITIVE_TANH");
  if (choice && std::string(choice) == "inline") return nullptr;
  return vsTanh;  // null when libtorch_cpu has no MKL
}

RowLoops<float> float_loops() {
#if ADDITIVE_X86
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"))
    return {16, avx512::forward_rows, avx512::backward_rows, float_tanh_array()};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return {8, avx2::forward_rows, avx2::backward_rows, float_tanh_array()};
#endif
  return {1, generic::forward_rows, generic::backward_rows, float_tanh_array()};
}

template <typename scalar>
RowLoops<scalar> loops();
template <>
RowLoops<float> loops<float>() {
  static const RowLoops<float> chosen = float_loops();
  return chosen;
}
template <>
RowLoops<double> loops<double>() {
  return {1, generic_double::forward_rows, generic_double::backward_rows, nullptr};
}

// Indices of the non-padding keys of every sequence (all keys when the mask is empty).
std::vector<std::vector<long>> kept_keys(const torch::Tensor& mask, long B, long Lk) {
  std::vector<std::vector<long>> kept(B);
  const bool* m = mask.numel() ? mask.data_ptr<bool>() : nullptr;
  for (long b = 0; b < B; ++b) {
    kept[b].reserve(Lk);
    for (long j = 0; j < Lk; ++j)
      if (!m || !m[b * Lk + j]) kept[b].push_back(j);
  }
  return kept;
}

// One (batch, head)'s kept keys transposed into bT (d_a × nvp, zero columns beyond nv) and values into vc (nv × D).
template <typename scalar>
void gather_keys(const scalar* b_bh, const scalar* v_bh, long v_stride, const std::vector<long>& keys, long d_a,
                 long nvp, long D, std::vector<scalar>& bT, std::vector<scalar>& vc) {
  const long nv = static_cast<long>(keys.size());
  bT.assign(d_a * nvp, scalar(0));
  vc.resize(nv * D);
  for (long j = 0; j < nv; ++j) {
    const scalar* brow = b_bh + keys[j] * d_a;
    for (long c = 0; c < d_a; ++c) bT[c * nvp + j] = brow[c];
    std::copy_n(v_bh + keys[j] * v_stride, D, vc.data() + j * D);
  }
}

void check_inputs(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& w, const torch::Tensor& value,
                  const torch::Tensor& mask) {
  const auto dtype = a.scalar_type();
  TORCH_CHECK(dtype == torch::kFloat || dtype == torch::kDouble, "additive_attention: expected float32 or float64, got ",
              dtype);
  for (const auto* t : {&a, &b, &w, &value})
    TORCH_CHECK(t->device().is_cpu() && t->scalar_type() == dtype, "additive_attention: every input must be a ",
                dtype, " CPU tensor, got ", t->scalar_type(), " on ", t->device());
  TORCH_CHECK(a.dim() == 4 && b.dim() == 4 && value.dim() == 4 && w.dim() == 2,
              "additive_attention: expected a B×H×Lq×d_a, b B×H×Lk×d_a, w H×d_a, value B×H×Lk×D; got ", a.sizes(),
              ", ", b.sizes(), ", ", w.sizes(), ", ", value.sizes());
  TORCH_CHECK(b.size(0) == a.size(0) && b.size(1) == a.size(1) && b.size(3) == a.size(3) &&
                  w.size(0) == a.size(1) && w.size(1) == a.size(3) && value.size(0) == a.size(0) &&
                  value.size(1) == a.size(1) && value.size(2) == b.size(2),
              "additive_attention: inconsistent shapes a ", a.sizes(), ", b ", b.sizes(), ", w ", w.sizes(),
              ", value ", value.sizes());
  TORCH_CHECK(mask.numel() == 0 || (mask.scalar_type() == torch::kBool && mask.dim() == 2 &&
                                    mask.size(0) == a.size(0) && mask.size(1) == b.size(2)),
              "additive_attention: key_padding_mask must be empty or a bool B×Lk tensor, got ", mask.sizes());
}

template <typename scalar>
std::tuple<torch::Tensor, torch::Tensor> forward_impl(const torch::Tensor& a, const torch::Tensor& b,
                                                      const torch::Tensor& w, const torch::Tensor& value,
                                                      const torch::Tensor& mask) {
  const long B = a.size(0), H = a.size(1), Lq = a.size(2), d_a = a.size(3), Lk = b.size(2), D = value.size(3);
  const RowLoops<scalar> rows = loops<scalar>();
  auto out = torch::zeros({B, H, Lq, D}, a.options());
  auto lse = torch::zeros({B, H, Lq}, a.options());
  const auto kept = kept_keys(mask, B, Lk);
  const scalar *pa = a.data_ptr<scalar>(), *pb = b.data_ptr<scalar>(), *pw = w.data_ptr<scalar>(),
               *pv = value.data_ptr<scalar>();
  scalar *po = out.data_ptr<scalar>(), *pl = lse.data_ptr<scalar>();
  const long vs0 = value.stride(0), vs1 = value.stride(1), vs2 = value.stride(2);
  // a task = up to 64 queries of one (batch, head): its keys are gathered once and streamed by every row
  const long q_block = std::min<long>(std::max<long>(Lq, 1), 64), q_blocks = (Lq + q_block - 1) / q_block;
  at::parallel_for(0, B * H * q_blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<scalar> bT, vc, s, t;
    long gathered = -1;
    for (int64_t task = begin; task < end; ++task) {
      const long bh = task / q_blocks, blk = task % q_blocks, bi = bh / H, h = bh % H;
      const auto& keys = kept[bi];
      const long nv = static_cast<long>(keys.size());
      if (nv == 0) continue;  // every key is padding: output rows stay zero
      const long nvp = (nv + rows.lanes - 1) / rows.lanes * rows.lanes;
      if (gathered != bh) {
        gather_keys(pb + bh * Lk * d_a, pv + bi * vs0 + h * vs1, vs2, keys, d_a, nvp, D, bT, vc);
        s.assign(nvp, scalar(0));
        t.assign(d_a * nvp, scalar(0));
        gathered = bh;
      }
      const long i0 = blk * q_block, i1 = std::min(Lq, i0 + q_block);
      rows.forward(pa + bh * Lq * d_a, i0, i1, d_a, bT.data(), vc.data(), nv, nvp, D, pw + h * d_a,
                   po + bh * Lq * D, pl + bh * Lq, s.data(), t.data(), rows.tanh_array);
    }
  });
  return {out, lse};
}

template <typename scalar>
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor> backward_impl(
    const torch::Tensor& dout, const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& w,
    const torch::Tensor& value, const torch::Tensor& mask, const torch::Tensor& out, const torch::Tensor& lse) {
  const long B = a.size(0), H = a.size(1), Lq = a.size(2), d_a = a.size(3), Lk = b.size(2), D = value.size(3);
  const RowLoops<scalar> rows = loops<scalar>();
  auto da = torch::zeros_like(a);
  auto db = torch::zeros_like(b);
  auto dw_per_seq = torch::zeros({B, H, d_a}, a.options());
  auto dvalue = torch::zeros({B, H, Lk, D}, a.options());
  const auto kept = kept_keys(mask, B, Lk);
  const scalar *pa = a.data_ptr<scalar>(), *pb = b.data_ptr<scalar>(), *pw = w.data_ptr<scalar>(),
               *pv = value.data_ptr<scalar>(), *po = out.data_ptr<scalar>(), *pdo = dout.data_ptr<scalar>(),
               *pl = lse.data_ptr<scalar>();
  scalar *pda = da.data_ptr<scalar>(), *pdb = db.data_ptr<scalar>(), *pdw = dw_per_seq.data_ptr<scalar>(),
         *pdv = dvalue.data_ptr<scalar>();
  const long vs0 = value.stride(0), vs1 = value.stride(1), vs2 = value.stride(2);
  // a task = one (batch, head): the key and value gradients sum over all of its queries
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<scalar> bT, vc, dbT, dvc, s, ds, t;
    for (int64_t bh = begin; bh < end; ++bh) {
      const long bi = bh / H, h = bh % H;
      const auto& keys = kept[bi];
      const long nv = static_cast<long>(keys.size());
      if (nv == 0) continue;  // every key is padding: the output is constant zero, so are its gradients
      const long nvp = (nv + rows.lanes - 1) / rows.lanes * rows.lanes;
      gather_keys(pb + bh * Lk * d_a, pv + bi * vs0 + h * vs1, vs2, keys, d_a, nvp, D, bT, vc);
      dbT.assign(d_a * nvp, scalar(0));
      dvc.assign(nv * D, scalar(0));
      s.assign(nvp, scalar(0));
      ds.assign(nvp, scalar(0));
      t.assign(d_a * nvp, scalar(0));
      rows.backward(pa + bh * Lq * d_a, Lq, d_a, bT.data(), vc.data(), nv, nvp, D, pw + h * d_a, po + bh * Lq * D,
                    pdo + bh * Lq * D, pl + bh * Lq, pda + bh * Lq * d_a, dbT.data(), dvc.data(), pdw + bh * d_a,
                    s.data(), ds.data(), t.data(), rows.tanh_array);
      for (long j = 0; j < nv; ++j) {  // scatter to the kept keys' rows; padding keys keep zero gradients
        scalar* dbrow = pdb + (bh * Lk + keys[j]) * d_a;
        for (long c = 0; c < d_a; ++c) dbrow[c] = dbT[c * nvp + j];
        std::copy_n(dvc.data() + j * D, D, pdv + (bh * Lk + keys[j]) * D);
      }
    }
  });
  return {da, db, dw_per_seq.sum(0), dvalue};
}

}  // namespace

// softmax_j(wᵀtanh(a_i + b_j)) weighted sum of values, and the log-sum-exp of every row (for the backward).
// a: B×H×Lq×d_a, b: B×H×Lk×d_a, w: H×d_a, value: B×H×Lk×D (any strides), key_padding_mask: empty or bool B×Lk
// (True = padding); float32 or float64 CPU. Returns (out B×H×Lq×D, lse B×H×Lq); rows whose keys are all padding
// are zero (lse 0).
std::tuple<torch::Tensor, torch::Tensor> additive_attention_forward(const torch::Tensor& a, const torch::Tensor& b,
                                                                    const torch::Tensor& w,
                                                                    const torch::Tensor& value,
                                                                    const torch::Tensor& key_padding_mask) {
  check_inputs(a, b, w, value, key_padding_mask);
  const auto ac = a.contiguous(), bc = b.contiguous(), wc = w.contiguous(), mc = key_padding_mask.contiguous();
  const auto vc = value.stride(3) == 1 ? value : value.contiguous();  // the head views of a projection stay views
  if (a.scalar_type() == torch::kDouble) return forward_impl<double>(ac, bc, wc, vc, mc);
  return forward_impl<float>(ac, bc, wc, vc, mc);
}

// Gradients (da, db, dw, dvalue) of additive_attention_forward's out for the upstream gradient dout (B×H×Lq×D),
// from the forward's inputs, out and lse; the tanh values are recomputed.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor> additive_attention_backward(
    const torch::Tensor& dout, const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& w,
    const torch::Tensor& value, const torch::Tensor& key_padding_mask, const torch::Tensor& out,
    const torch::Tensor& lse) {
  check_inputs(a, b, w, value, key_padding_mask);
  TORCH_CHECK(dout.sizes() == out.sizes() && dout.scalar_type() == a.scalar_type() &&
                  lse.sizes() == out.sizes().slice(0, 3),
              "additive_attention_backward: dout ", dout.sizes(), ", out ", out.sizes(), ", lse ", lse.sizes(),
              " do not match");
  const auto ac = a.contiguous(), bc = b.contiguous(), wc = w.contiguous(), mc = key_padding_mask.contiguous(),
             oc = out.contiguous(), dc = dout.contiguous(), lc = lse.contiguous();
  const auto vc = value.stride(3) == 1 ? value : value.contiguous();
  if (a.scalar_type() == torch::kDouble) return backward_impl<double>(dc, ac, bc, wc, vc, mc, oc, lc);
  return backward_impl<float>(dc, ac, bc, wc, vc, mc, oc, lc);
}

// How the float32 loops run on this CPU: "<lanes> lanes, <tanh>" (16: AVX-512, 8: AVX2+FMA, 1: plain C++;
// tanh "mkl" or "inline").
std::string additive_attention_isa() {
  const auto rows = loops<float>();
  return std::to_string(rows.lanes) + " lanes, " + (rows.tanh_array ? "mkl" : "inline") + " tanh";
}
