//@ part: header
// rope_lit's native training loss for the translation model on the CPU (float32): the
// label-smoothed cross-entropy of each row of logits and its gradient, in one pass over the row
// while it is in the cache, instead of PyTorch's log-softmax, gather, sum and their backward passes.
// Built on first use by rope_lit.cpp_build, like the rotary kernel.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/extension.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

using torch::Tensor;

// exp_shifted and max_and_sum: row helpers kept in decoder_cpu.cpp (its part `softmax`, whose
// exp_shifted the decoding step uses too), put here by rope_lit.translation.fast when it builds this file.
//@ insert: decoder_cpu.cpp softmax

//@ part: loss
// For each row r of the logits z (n, V) with target y = target[r] and smoothing ε:
//   ℓ_r = lse(z_r) − (1 − ε)·z_ry − ε·mean(z_r),   ∂ℓ_r/∂z_r = softmax(z_r) − (1 − ε)·e_y − ε/V,
// the gradient written into grad (n, V). Rows whose target is `ignore` get ℓ = 0 and a zero
// gradient. Every target is checked before anything is written. Returns the n losses.
Tensor smoothed_ce_rows(Tensor z, Tensor target, double eps, int64_t ignore, Tensor grad) {
  TORCH_CHECK(z.dim() == 2 && z.device().is_cpu() && z.scalar_type() == at::kFloat &&
                  z.is_contiguous(), "z must be a contiguous (rows, vocab) float32 CPU tensor");
  TORCH_CHECK(grad.sizes() == z.sizes() && grad.device().is_cpu() &&
                  grad.scalar_type() == at::kFloat && grad.is_contiguous(),
              "grad must be a contiguous float32 CPU tensor of z's shape");
  const int64_t n = z.size(0), V = z.size(1);
  const float* z0 = z.data_ptr<float>();
  const float* g0 = grad.data_ptr<float>();
  TORCH_CHECK(g0 + n * V <= z0 || z0 + n * V <= g0, "grad must not overlap z");
  TORCH_CHECK(target.device().is_cpu() && target.scalar_type() == at::kLong &&
                  target.is_contiguous() && target.dim() == 1 && target.size(0) == n,
              "target must be a contiguous int64 CPU tensor with one entry per row of z");
  TORCH_CHECK(eps >= 0.0 && eps <= 1.0, "eps must be in [0, 1], got ", eps);
  const int64_t* tp = target.data_ptr<int64_t>();
  for (int64_t r = 0; r < n; ++r)
    TORCH_CHECK(tp[r] == ignore || (tp[r] >= 0 && tp[r] < V), "target holds ", tp[r],
                ", which is neither a class in [0, ", V, ") nor ignore=", ignore);
  Tensor loss = at::empty({n}, z.options());
  const float* zp = z.data_ptr<float>();
  float* gp = grad.data_ptr<float>();
  float* lp = loss.data_ptr<float>();
  const float e = (float)eps, off = (float)(eps / V);
  at::parallel_for(0, n, std::max<int64_t>(1, 16384 / std::max<int64_t>(V, 1)),
                   [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = zp + r * V;
      float* g = gp + r * V;
      if (tp[r] == ignore) { std::fill(g, g + V, 0.f); lp[r] = 0.f; continue; }
      float m, sum, se = 0.f;
      max_and_sum(row, V, m, sum);
#pragma omp simd reduction(+ : se)
      for (int64_t j = 0; j < V; ++j) se += (g[j] = exp_shifted(row[j] - m));
      const float lse = m + std::log(se);
      lp[r] = (1.f - e) * (lse - row[tp[r]]) + e * (lse - sum / V);
      const float inv = 1.f / se;
#pragma omp simd
      for (int64_t j = 0; j < V; ++j) g[j] = g[j] * inv - off;
      g[tp[r]] += e - 1.f;
    }
  });
  return loss;
}
