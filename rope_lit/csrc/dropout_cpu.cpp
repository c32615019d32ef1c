//@ part: header
// rope_lit's native dropout for the translation model's training on the CPU (float32): the mask
// comes from a counter-based generator, so the backward pass makes it again instead of storing it,
// and a bias add and a ReLU before the dropout, or a residual add after it, are done in the same
// pass (and the backward passes sum the bias's gradient in theirs).
// Built on first use by rope_lit.cpp_build, like the rotary kernel.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/extension.h>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

using torch::Tensor;

//@ part: bits
// 64 random bits for block j of four elements: splitmix64's output function applied to the
// counter seed + (j + 1)·γ. Element 4j + l reads bits 16l to 16l + 15 as a signed 16-bit integer
// (little-endian order, as `view(torch.int16)` of an int64 tensor).
static constexpr uint64_t GAMMA = 0x9E3779B97F4A7C15ULL;

static inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// The 16-bit integers of elements first..first+255 (first a multiple of 256) into u.
static inline void uniform16(uint64_t seed, int64_t first, int16_t* u) {
  alignas(64) uint64_t h[64];
  const uint64_t j0 = (uint64_t)(first / 4) + 1;
#pragma omp simd
  for (int i = 0; i < 64; ++i) h[i] = mix64(seed + (j0 + (uint64_t)i) * GAMMA);
  std::memcpy(u, h, sizeof h);
}

//@ part: forward
// o = m ⊙ f(x + b) on one segment: m = s where u >= thr (thr = cut - 32768), else 0; f the
// identity or ReLU; b a bias (Bias: the segment's columns) or nothing. A dropped element is
// multiplied by 0, as torch's dropout does (NaN stays NaN).
// o may be x (in place): each element is read before it is written.
template <bool Relu, bool Bias>
static inline void drop_seg(const float* x, const float* __restrict b, float* o,
                            const int16_t* __restrict u, int64_t len, int16_t thr, float s) {
#pragma omp simd
  for (int64_t i = 0; i < len; ++i) {
    float v = Bias ? x[i] + b[i] : x[i];
    if (Relu) v = v < 0.f ? 0.f : v;           // NaN stays NaN, as torch.relu
    o[i] = v * (u[i] >= thr ? s : 0.f);
  }
}

static inline void drop_any(const float* x, const float* b, float* o, const int16_t* u,
                            int64_t len, int16_t thr, float s, bool relu) {
  if (b == nullptr) {
    if (relu) drop_seg<true, false>(x, b, o, u, len, thr, s);
    else drop_seg<false, false>(x, b, o, u, len, thr, s);
  } else {
    if (relu) drop_seg<true, true>(x, b, o, u, len, thr, s);
    else drop_seg<false, true>(x, b, o, u, len, thr, s);
  }
}

static inline void add_to(float* __restrict o, const float* __restrict r, int64_t len) {
#pragma omp simd
  for (int64_t i = 0; i < len; ++i) o[i] += r[i];
}

//@ part: forward_chunks
// o = r + m ⊙ f(x + b) over elements e0 .. e0 + len of the tensor (rows of C elements): the
// chunk is cut where a row ends, so that each piece reads one run of the bias.
static inline void drop_chunk(const float* x, const float* b, const float* r, float* o,
                              const int16_t* u, int64_t e0, int64_t len, int64_t C, int16_t thr,
                              float s, bool relu) {
  for (int64_t done = 0; done < len;) {
    const int64_t col = (e0 + done) % C;
    const int64_t seg = b == nullptr ? len - done : std::min(len - done, C - col);
    drop_any(x + e0 + done, b == nullptr ? nullptr : b + col, o + e0 + done, u + done, seg, thr,
             s, relu);
    done += seg;
  }
  if (r != nullptr) add_to(o + e0, r + e0, len);  // while the chunk is in cache
}

// residual + dropout(f(x + bias)) over the whole tensor, in chunks of 256 elements (one
// `uniform16` each), into a new tensor or (inplace) into x. The backward pass of a dropout
// without ReLU is this same call on the gradient, with the same seed and no residual or bias.
Tensor dropout_forward(Tensor x, std::optional<Tensor> residual, int64_t seed, int64_t cut,
                       double scale, bool relu, std::optional<Tensor> bias, bool inplace) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == at::kFloat && x.is_contiguous() &&
                  x.dim() >= 1,
              "x must be a contiguous float32 CPU tensor");
  TORCH_CHECK(cut >= 0 && cut < 65536, "cut must be in [0, 65536)");
  const float* r = nullptr;
  if (residual) {
    TORCH_CHECK(residual->device().is_cpu() && residual->scalar_type() == at::kFloat &&
                    residual->is_contiguous() && residual->sizes() == x.sizes(),
                "residual must be a contiguous float32 CPU tensor of x's shape");
    r = residual->data_ptr<float>();
  }
  const int64_t C = x.size(-1);
  const float* b = nullptr;
  if (bias) {
    TORCH_CHECK(bias->device().is_cpu() && bias->scalar_type() == at::kFloat &&
                    bias->is_contiguous() && bias->dim() == 1 && bias->size(0) == C,
                "bias must be a contiguous float32 CPU tensor of x's last size");
    b = bias->data_ptr<float>();
  }
  Tensor out = inplace ? x : at::empty_like(x);
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t n = x.numel();
  const int16_t thr = (int16_t)(cut - 32768);
  const float s = (float)scale;
  at::parallel_for(0, (n + 255) / 256, 64, [=](int64_t c0, int64_t c1) {
    alignas(64) int16_t u[256];
    for (int64_t ch = c0; ch < c1; ++ch) {
      const int64_t e0 = ch * 256;
      uniform16((uint64_t)seed, e0, u);
      drop_chunk(xp, b, r, op, u, e0, std::min<int64_t>(256, n - e0), C, thr, s, relu);
    }
  });
  return out;
}

//@ part: relu_backward
// The gradient of m ⊙ ReLU(x + b) from its output y: g·scale where y > 0, else 0. An element
// y > 0 was kept and had x + b > 0; every other one has gradient 0 (torch's ReLU takes 0 at 0 too).
// With `bias_grad`, also the gradient of b, the column sums, in the same pass: each thread adds
// its rows into its own sums, 64 rows at a time (so rounding grows with the number of blocks, not
// of rows), then the threads' sums are added.
// With `inplace`, the gradient is written over g.
static inline void relu_grad(const float* g, const float* __restrict y, float* o,
                             float* __restrict sum, int64_t len, float s) {
  if (sum == nullptr) {
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) o[i] = y[i] > 0.f ? g[i] * s : 0.f;
  } else {
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) { o[i] = y[i] > 0.f ? g[i] * s : 0.f; sum[i] += o[i]; }
  }
}

std::vector<Tensor> dropout_relu_backward(Tensor g, Tensor y, double scale, bool bias_grad,
                                          bool inplace) {
  TORCH_CHECK(g.device().is_cpu() && g.scalar_type() == at::kFloat && g.is_contiguous() &&
                  y.scalar_type() == at::kFloat && y.is_contiguous() && g.sizes() == y.sizes() &&
                  g.dim() >= 1,
              "g and y must be contiguous float32 CPU tensors of one shape");
  Tensor out = inplace ? g : at::empty_like(g);   // inplace: over g
  const float* gp = g.data_ptr<float>();
  const float* yp = y.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const float s = (float)scale;
  if (!bias_grad) {
    at::parallel_for(0, g.numel(), 16384, [=](int64_t i0, int64_t i1) {
      relu_grad(gp + i0, yp + i0, op + i0, nullptr, i1 - i0, s);
    });
    return {out};
  }
  const int64_t C = g.size(-1), R = C ? g.numel() / C : 0;
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), R / 8));
  Tensor sums = at::zeros({parts, C}, g.options());
  float* sp = sums.data_ptr<float>();
  at::parallel_for(0, parts, 1, [=](int64_t t0, int64_t t1) {
    std::vector<float> block(C);   // 64 rows at a time, then into the thread's sums
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t end = R * (t + 1) / parts;
      for (int64_t r = R * t / parts; r < end; r += 64) {
        std::fill(block.begin(), block.end(), 0.f);
        for (int64_t i = r; i < std::min(r + 64, end); ++i)
          relu_grad(gp + i * C, yp + i * C, op + i * C, block.data(), C, s);
        float* sum = sp + t * C;
        for (int64_t c = 0; c < C; ++c) sum[c] += block[c];
      }
    }
  });
  return {out, parts == 1 ? sums[0] : sums.sum(0)};
}

//@ part: backward
// The gradient of r + m ⊙ (x + b) for x (no ReLU): m ⊙ g, the mask made again from the seed.
// With `bias_grad`, also its column sums, the gradient of b, in the same pass and in the same
// order as `dropout_relu_backward` adds them.
static inline void drop_sum(const float* __restrict g, float* __restrict o,
                            const int16_t* __restrict u, float* __restrict sum, int64_t len,
                            int16_t thr, float s) {
#pragma omp simd
  for (int64_t i = 0; i < len; ++i) { o[i] = g[i] * (u[i] >= thr ? s : 0.f); sum[i] += o[i]; }
}

std::vector<Tensor> dropout_backward(Tensor g, int64_t seed, int64_t cut, double scale,
                                     bool bias_grad) {
  if (!bias_grad)
    return {dropout_forward(g, std::nullopt, seed, cut, scale, false, std::nullopt, false)};
  TORCH_CHECK(g.device().is_cpu() && g.scalar_type() == at::kFloat && g.is_contiguous() &&
                  g.dim() >= 1,
              "g must be a contiguous float32 CPU tensor");
  TORCH_CHECK(cut >= 0 && cut < 65536, "cut must be in [0, 65536)");
  Tensor out = at::empty_like(g);
  const int64_t C = g.size(-1), R = C ? g.numel() / C : 0;
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), R / 8));
  Tensor sums = at::zeros({parts, C}, g.options());
  const float* gp = g.data_ptr<float>();
  float* op = out.data_ptr<float>();
  float* sp = sums.data_ptr<float>();
  const int16_t thr = (int16_t)(cut - 32768);
  const float s = (float)scale;
  at::parallel_for(0, parts, 1, [=](int64_t t0, int64_t t1) {
    alignas(64) int16_t u[256];
    std::vector<float> block(C);   // 64 rows at a time, then into the thread's sums
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t end = R * (t + 1) / parts;
      for (int64_t r = R * t / parts; r < end; r += 64) {
        std::fill(block.begin(), block.end(), 0.f);
        const int64_t e1 = std::min(r + 64, end) * C;
        int64_t have = -1;                          // the 256-element chunk u holds
        for (int64_t e = r * C; e < e1;) {
          const int64_t ch = e / 256, col = e % C;
          if (ch != have) { uniform16((uint64_t)seed, ch * 256, u); have = ch; }
          const int64_t len = std::min({e1 - e, (ch + 1) * 256 - e, C - col});
          drop_sum(gp + e, op + e, u + (e - ch * 256), block.data() + col, len, thr, s);
          e += len;
        }
        float* sum = sp + t * C;
        for (int64_t c = 0; c < C; ++c) sum[c] += block[c];
      }
    }
  });
  return {out, parts == 1 ? sums[0] : sums.sum(0)};
}
