// Fused per-row kernels for the CPU inference paths of `cosine` and `euclidean` (attnbench.attention.cpu_kernels),
// and the module's bindings (the fused additive attention lives in additive_kernel.cpp).
//
// The heads that MultiHeadAttention hands to a score function are strided views of one projection
// (B x H x L x d, rows of d contiguous floats, 3·H·d floats apart). Eager PyTorch normalises such a view in three
// passes over memory (a contiguous copy, a norm, a rescale); these kernels read each row once and, for the unit
// vectors, write it once, which at short lengths is most of what `cosine` pays beyond `scaled_dot`
// (docs/cost.md, "Inference at short lengths"). Float32, CPU, no autograd: the Python side uses them only
// where no gradient is needed and falls back to the eager formulas everywhere else.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>

namespace {

// Sum of squares of one row of `n` floats.
template <int64_t N>
inline float row_sum_sq(const float* __restrict row, int64_t n) {
  const int64_t len = N > 0 ? N : n;
  float acc = 0.f;
#pragma omp simd reduction(+ : acc)
  for (int64_t c = 0; c < len; ++c) acc += row[c] * row[c];
  return acc;
}

// out = row * (scale / max(‖row‖, eps)), the F.normalize formula times a per-head scale.
template <int64_t N>
inline void unit_row(const float* __restrict row, float* __restrict out, int64_t n, float scale, float eps) {
  const int64_t len = N > 0 ? N : n;
  const float factor = (1.0f / std::max(std::sqrt(row_sum_sq<N>(row, len)), eps)) * scale;
#pragma omp simd
  for (int64_t c = 0; c < len; ++c) out[c] = row[c] * factor;
}

void check_heads(const torch::Tensor& x, const char* name) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat && x.dim() == 4,
              name, ": expected a float32 CPU tensor B x H x L x d, got ", x.scalar_type(), " ", x.sizes());
  TORCH_CHECK(x.stride(3) == 1 || x.size(3) == 1, name, ": the last dimension must be contiguous, strides ",
              x.strides());
}

// Rows per task of at::parallel_for: about GRAIN_SIZE floats each.
int64_t grain_rows(int64_t d) { return std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(d, 1)); }

}  // namespace

// x / max(‖x‖₂, eps) along the last dimension, times scale[h] for head h when `scale` (H floats) is non-empty.
// x: B x H x L x d float32 (any strides, last one 1) -> a new contiguous B x H x L x d tensor.
torch::Tensor unit_rows(const torch::Tensor& x, const torch::Tensor& scale, double eps) {
  check_heads(x, "unit_rows");
  const int64_t B = x.size(0), H = x.size(1), L = x.size(2), D = x.size(3);
  const bool has_scale = scale.numel() > 0;
  TORCH_CHECK(!has_scale || (scale.scalar_type() == torch::kFloat && scale.dim() == 1 && scale.size(0) == H),
              "unit_rows: scale must be empty or a float32 vector of H = ", H, " values, got ", scale.sizes());
  auto out = torch::empty({B, H, L, D}, x.options());
  const torch::Tensor scale_c = has_scale ? scale.contiguous() : scale;
  const float* src = x.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  const float* head_scale = has_scale ? scale_c.data_ptr<float>() : nullptr;
  const int64_t sb = x.stride(0), sh = x.stride(1), sl = x.stride(2);
  const float feps = static_cast<float>(eps);
  // one task = a run of rows in (b, h, l) order; rows are written contiguously
  at::parallel_for(0, B * H * L, grain_rows(D), [=](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t l = r % L, bh = r / L, h = bh % H, b = bh / H;
      const float* row = src + b * sb + h * sh + l * sl;
      float* o = dst + r * D;
      const float s = has_scale ? head_scale[h] : 1.0f;
      switch (D) {
        case 16: unit_row<16>(row, o, D, s, feps); break;
        case 32: unit_row<32>(row, o, D, s, feps); break;
        case 64: unit_row<64>(row, o, D, s, feps); break;
        case 128: unit_row<128>(row, o, D, s, feps); break;
        default: unit_row<0>(row, o, D, s, feps);
      }
    }
  });
  return out;
}

// Σ_c x_c² along the last dimension. x: B x H x L x d float32 (any strides, last one 1) -> B x H x L.
torch::Tensor row_sq_norms(const torch::Tensor& x) {
  check_heads(x, "row_sq_norms");
  const int64_t B = x.size(0), H = x.size(1), L = x.size(2), D = x.size(3);
  auto out = torch::empty({B, H, L}, x.options());
  const float* src = x.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  const int64_t sb = x.stride(0), sh = x.stride(1), sl = x.stride(2);
  at::parallel_for(0, B * H * L, grain_rows(D), [=](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t l = r % L, bh = r / L, h = bh % H, b = bh / H;
      const float* row = src + b * sb + h * sh + l * sl;
      switch (D) {
        case 16: dst[r] = row_sum_sq<16>(row, D); break;
        case 32: dst[r] = row_sum_sq<32>(row, D); break;
        case 64: dst[r] = row_sum_sq<64>(row, D); break;
        case 128: dst[r] = row_sum_sq<128>(row, D); break;
        default: dst[r] = row_sum_sq<0>(row, D);
      }
    }
  });
  return out;
}

// additive_kernel.cpp
std::tuple<torch::Tensor, torch::Tensor> additive_attention_forward(const torch::Tensor& a, const torch::Tensor& b,
                                                                    const torch::Tensor& w,
                                                                    const torch::Tensor& value,
                                                                    const torch::Tensor& key_padding_mask);
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor> additive_attention_backward(
    const torch::Tensor& dout, const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& w,
    const torch::Tensor& value, const torch::Tensor& key_padding_mask, const torch::Tensor& out,
    const torch::Tensor& lse);
std::string additive_attention_isa();

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("unit_rows", &unit_rows, "x / max(|x|, eps) * scale[h] along the last dim (B x H x L x d float32, CPU)");
  m.def("row_sq_norms", &row_sq_norms, "sum of squares along the last dim (B x H x L x d float32, CPU)");
  m.def("additive_attention_forward", &additive_attention_forward,
        "fused additive attention: (out, lse) from a = W_q q, b = W_k k, w, value, key_padding_mask");
  m.def("additive_attention_backward", &additive_attention_backward,
        "gradients (da, db, dw, dvalue) of additive_attention_forward, tanh recomputed");
  m.def("additive_attention_isa", &additive_attention_isa, "how the additive kernel's float32 loops run here");
}
