//@ part: header
// rope_lit's native decoding step: one call per generated token for the whole pre-norm decoder
// of the translation model, float32 on the CPU.
//
// The matrix products go to ATen's `mm` (the BLAS kernel that `F.linear` uses); everything else
// (layer norms, biases, RoPE, the key/value cache, both attentions, ReLU, residuals) is plain C++
// on buffers allocated once. Built on first use by rope_lit.cpp_build, like the rotary kernel.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/extension.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

using torch::Tensor;

//@ part: softmax
// e^x for the shifted scores of a softmax (x <= 0, or NaN), in a form the compiler vectorises:
// x = n·ln 2 + r with |r| <= ln 2 / 2, e^r by Cephes' degree-6 polynomial for expf, 2^n from the
// exponent bits. Within 2 units in the last place of std::exp; exactly 0 below -87.3 (a masked
// key's -inf included); NaN stays NaN.
static inline float exp_shifted(float x) {
  const float n = (x * 1.44269504088896341f + 12582912.f) - 12582912.f;   // round(x / ln 2)
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;   // x - n·ln 2, in two parts
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f; y = y * r + 8.3334519073e-3f; y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f; y = y * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.f;
  const bool normal = x >= -87.3f;   // false below, and for NaN
  const uint32_t bits = (uint32_t)((int32_t)(normal ? n : 0.f) + 127) << 23;   // 2^n
  float p;
  std::memcpy(&p, &bits, sizeof p);
  return x < -87.3f ? 0.f : y * p;
}

// The maximum and the sum of l[0..n) in one pass: 64 running maxima and sums in vector registers
// (a NaN anywhere makes the sum NaN; the maximum skips it).
static inline void max_and_sum(const float* l, int64_t n, float& m, float& sum) {
  constexpr int L = 64;
  float mx[L], sm[L];
  for (int k = 0; k < L; ++k) { mx[k] = -std::numeric_limits<float>::infinity(); sm[k] = 0.f; }
  int64_t j = 0;
  for (; j + L <= n; j += L)
#pragma omp simd
    for (int k = 0; k < L; ++k) { mx[k] = std::max(mx[k], l[j + k]); sm[k] += l[j + k]; }
  m = -std::numeric_limits<float>::infinity(), sum = 0.f;
  for (int k = 0; k < L; ++k) { m = std::max(m, mx[k]); sum += sm[k]; }
  for (; j < n; ++j) { m = std::max(m, l[j]); sum += l[j]; }
}

//@ part: helpers
// y = LayerNorm(x) over d features, with float accumulation in two passes (mean, then variance).
static inline void layer_norm_row(const float* x, float* y, const float* g, const float* b,
                                  int64_t d, double eps) {
  float mean = 0.f, var = 0.f;
#pragma omp simd reduction(+ : mean)
  for (int64_t i = 0; i < d; ++i) mean += x[i];
  mean /= d;
#pragma omp simd reduction(+ : var)
  for (int64_t i = 0; i < d; ++i) var += (x[i] - mean) * (x[i] - mean);
  const float rstd = 1.f / std::sqrt(var / d + (float)eps);
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) y[i] = (x[i] - mean) * rstd * g[i] + b[i];
}

static inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Rotate the first 2·r2 features of a head by the angle whose cos/sin are c, s (in place).
static inline void rope_row(float* x, const float* c, const float* s, int64_t r2,
                            bool interleaved) {
  if (interleaved) {
    for (int64_t i = 0; i < r2; ++i) {
      const float a = x[2 * i], b = x[2 * i + 1];
      x[2 * i] = a * c[i] - b * s[i];
      x[2 * i + 1] = b * c[i] + a * s[i];
    }
  } else {
#pragma omp simd
    for (int64_t i = 0; i < r2; ++i) {
      const float a = x[i], b = x[i + r2];
      x[i] = a * c[i] - b * s[i];
      x[i + r2] = b * c[i] + a * s[i];
    }
  }
}

// out = softmax(q·kⱼ + biasⱼ) · vⱼ over j < n, for one head: keys and values (n, dk) rows with
// row stride `stride`; scores is scratch of n floats.
static inline void attend_head(const float* q, const float* k, const float* v, int64_t n,
                               int64_t dk, int64_t stride, const float* bias, float* scores,
                               float* out) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    float s = dot(q, k + j * stride, dk);
    if (bias) s += bias[j];
    scores[j] = s;
    m = std::max(m, s);
  }
  float total = 0.f;
#pragma omp simd reduction(+ : total)
  for (int64_t j = 0; j < n; ++j) total += (scores[j] = exp_shifted(scores[j] - m));
  const float inv = 1.f / total;   // a row with every key masked gives NaN, as softmax does
  for (int64_t i = 0; i < dk; ++i) out[i] = 0.f;
  for (int64_t j = 0; j < n; ++j) {
    const float p = scores[j] * inv;
    const float* vj = v + j * stride;
#pragma omp simd
    for (int64_t i = 0; i < dk; ++i) out[i] += p * vj[i];
  }
}

// An argument check: the message is built only when the check fails.
#define check(ok, message) TORCH_CHECK(ok, "native decoder: ", message)

static void check_f32(const Tensor& t, const char* name, std::vector<int64_t> shape) {
  check(t.defined() && t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous(),
        std::string(name) + " must be a contiguous float32 CPU tensor");
  check(t.sizes().vec() == shape,
        std::string(name) + " has shape " + c10::str(t.sizes()) + ", expected " + c10::str(shape));
}

//@ part: decoder
// Per layer, 18 tensors in this order: W_qkv (3d, d) with 1/√d_head folded into its W_q rows,
// b_qkv (3d), W_o, b_o, the cross-attention's W_q (scaled likewise), b_q, W_o, b_o, W_1 (f, d),
// b_1, W_2 (d, f), b_2, then γ, β of the three layer norms.
struct NativeDecoder {
  int64_t n_layers, d, f, h, dk, vocab, rows, max_steps, r2_self = 0, r2_cross = 0;
  bool il_self = false, il_cross = false;
  double scale;
  std::vector<Tensor> w;      // 18 per layer
  std::vector<Tensor> wt;     // the six matrices' transposed views per layer, then Eᵀ
  std::vector<double> eps;    // 3 per layer, then the final norm's
  std::vector<Tensor> kv;     // per layer (2, rows, h, max_steps, dk): written at slot t
  std::vector<Tensor> ck, cv; // per layer (rows, h, src_len, dk): cross-attention keys, values
  Tensor mask_bias;           // (rows, src_len) 0 / -inf, or undefined
  Tensor embed, pe, fin_g, fin_b;
  Tensor x, y, big, a;        // work buffers
  Tensor qkv_out, d_out, f_out;   // views of `big`: the products' outputs (3d, d or f columns)

  NativeDecoder(std::vector<Tensor> weights, std::vector<double> eps_, std::vector<Tensor> kv_,
                Tensor embed_, std::optional<Tensor> pe_, Tensor fin_g_, Tensor fin_b_,
                int64_t heads, int64_t rotary_dim_self, bool interleaved_self,
                int64_t rotary_dim_cross, bool interleaved_cross)
      : w(std::move(weights)), eps(std::move(eps_)), kv(std::move(kv_)), embed(embed_),
        fin_g(fin_g_), fin_b(fin_b_) {
    check(w.size() % 18 == 0 && !w.empty(), "weights must hold 18 tensors per layer");
    n_layers = w.size() / 18;
    check((int64_t)eps.size() == 3 * n_layers + 1, "eps must hold 3 values per layer and 1 more");
    check((int64_t)kv.size() == n_layers, "kv must hold one cache per layer");
    vocab = embed.size(0); d = embed.size(1); h = heads;
    check(h > 0 && d % h == 0, "heads must divide d_model");
    dk = d / h; f = w[8].size(0);
    check_f32(embed, "embed", {vocab, d});
    for (int64_t l = 0; l < n_layers; ++l) {
      const std::vector<std::vector<int64_t>> shapes = {
          {3 * d, d}, {3 * d}, {d, d}, {d}, {d, d}, {d}, {d, d}, {d},
          {f, d}, {f}, {d, f}, {d}};
      for (int i = 0; i < 18; ++i) {
        const Tensor& t = w[18 * l + i];   // the layer norms' γ, β come from 12 on, each (d)
        check_f32(t, ("layer " + std::to_string(l) + " tensor " + std::to_string(i)).c_str(),
                  i < 12 ? shapes[i] : std::vector<int64_t>{d});
      }
    }
    check(kv[0].dim() == 5 && kv[0].size(0) == 2, "kv caches must be (2, rows, h, steps, dk)");
    rows = kv[0].size(1); max_steps = kv[0].size(3);
    for (auto& c : kv) check_f32(c, "kv cache", {2, rows, h, max_steps, dk});
    if (pe_ && pe_->defined()) { pe = *pe_; check_f32(pe, "pe", {pe.size(0), d}); }
    check_f32(fin_g, "final norm weight", {d}); check_f32(fin_b, "final norm bias", {d});
    check(rotary_dim_self >= 0 && rotary_dim_self % 2 == 0 && rotary_dim_self <= dk &&
              rotary_dim_cross >= 0 && rotary_dim_cross % 2 == 0 && rotary_dim_cross <= dk,
          "rotary dims must be even and at most head_dim");
    r2_self = rotary_dim_self / 2; r2_cross = rotary_dim_cross / 2;
    il_self = interleaved_self; il_cross = interleaved_cross;
    scale = std::sqrt((double)d);
    auto opt = embed.options();
    x = at::empty({rows, d}, opt); y = at::empty({rows, d}, opt);
    big = at::empty({rows, std::max(3 * d, f)}, opt); a = at::empty({rows, d}, opt);
    for (int64_t l = 0; l < n_layers; ++l)
      for (int i = 0; i < 12; i += 2) wt.push_back(w[18 * l + i].t());
    wt.push_back(embed.t());
    qkv_out = big.narrow(1, 0, 3 * d); d_out = big.narrow(1, 0, d); f_out = big.narrow(1, 0, f);
  }

  //@ part: decoder_calls
  // The cross-attention's keys and values per layer, and the source mask as 0 / -inf.
  void set_cross(std::vector<Tensor> k, std::vector<Tensor> v, std::optional<Tensor> bias) {
    check((int64_t)k.size() == n_layers && (int64_t)v.size() == n_layers,
          "one cross key and value tensor per layer");
    const int64_t S = k[0].size(2);
    for (int64_t l = 0; l < n_layers; ++l) {
      check_f32(k[l], "cross keys", {rows, h, S, dk});
      check_f32(v[l], "cross values", {rows, h, S, dk});
    }
    ck = std::move(k); cv = std::move(v);
    mask_bias = bias && bias->defined() ? *bias : Tensor();
    if (mask_bias.defined()) check_f32(mask_bias, "mask bias", {rows, S});
  }

  // out (rows, n) = in (rows, k) · Wᵀ, given Wᵀ (a view): the BLAS product F.linear makes.
  static void linear(const Tensor& in, const Tensor& Wt, Tensor& out) { at::mm_out(out, in, Wt); }

  // For every row and head: attend q (rows, stride_q, …) to n keys/values of layer caches.
  void attention(const float* q, int64_t q_stride, const float* keys, const float* values,
                 int64_t n, int64_t kv_head_stride, const float* bias, int64_t bias_stride,
                 float* out) {
    const int64_t tasks = rows * h;
    auto run = [&](int64_t lo, int64_t hi) {
      thread_local std::vector<float> scratch;
      if ((int64_t)scratch.size() < n) scratch.resize(n);
      float* sc = scratch.data();
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t b = task / h, head = task % h;
        attend_head(q + b * q_stride + head * dk, keys + task * kv_head_stride,
                    values + task * kv_head_stride, n, dk, dk,
                    bias ? bias + b * bias_stride : nullptr, sc, out + b * d + head * dk);
      }
    };
    // below about 256k multiply-adds per thread, waking the other threads costs more than it saves
    const int64_t grain = std::max<int64_t>(1, 262144 / std::max<int64_t>(1, n * dk));
    if (tasks <= grain) run(0, tasks);
    else at::parallel_for(0, tasks, grain, run);
  }

  //@ part: step
  // One step for the tokens at position t (tok[b · stride]): the logits of position t + 1.
  // cs, ss / cc, sc: cos and sin of position t for self- and cross-attention (null: no RoPE).
  void run_step(const int64_t* tok, int64_t stride, int64_t t, const float* cs, const float* ss,
                const float* cc, const float* sc_, Tensor logits) {
    const int64_t S = ck[0].size(2);
    float *X = x.data_ptr<float>(), *Y = y.data_ptr<float>(), *A = a.data_ptr<float>();
    const float* E = embed.data_ptr<float>();
    const float* p = pe.defined() ? pe.data_ptr<float>() + t * d : nullptr;
    for (int64_t b = 0; b < rows; ++b) {   // x = √d · E[token] (+ row t of the sinusoidal table)
      const int64_t id = tok[b * stride];
      TORCH_CHECK_INDEX(id >= 0 && id < vocab, "native decoder: tokens must be ids in [0, ", vocab,
                        "), got ", id);
      const float* e = E + id * d;
      for (int64_t i = 0; i < d; ++i) X[b * d + i] = e[i] * (float)scale + (p ? p[i] : 0.f);
    }
    const int64_t wd = big.size(1);
    float* B = big.data_ptr<float>();
    auto norm = [&](float* out, const float* gamma, const float* beta, double e) {   // LN(x)
      for (int64_t b = 0; b < rows; ++b) layer_norm_row(X + b * d, out + b * d, gamma, beta, d, e);
    };
    auto residual = [&](const float* bias) {   // x += y + bias: a block's output added
      for (int64_t b = 0; b < rows; ++b)
        for (int64_t i = 0; i < d; ++i) X[b * d + i] += Y[b * d + i] + bias[i];
    };
    for (int64_t l = 0; l < n_layers; ++l) {
      const Tensor* W = &w[18 * l];
      const Tensor* T = &wt[6 * l];
      auto g = [&](int i) { return W[i].data_ptr<float>(); };
      // self-attention: LN → fused W_qkv → RoPE at t → k, v into slot t → attend to slots 0..t
      norm(Y, g(12), g(13), eps[3 * l]);
      linear(y, T[0], qkv_out);
      float* kc = kv[l].data_ptr<float>();
      float* vc = kc + rows * h * max_steps * dk;
      const float* bq = g(1);
      for (int64_t b = 0; b < rows; ++b) {
        float* r = B + b * wd;
        for (int64_t i = 0; i < 3 * d; ++i) r[i] += bq[i];
        for (int64_t head = 0; head < h; ++head) {
          float *q = r + head * dk, *k = r + d + head * dk, *v = r + 2 * d + head * dk;
          if (r2_self) {
            rope_row(q, cs, ss, r2_self, il_self);
            rope_row(k, cs, ss, r2_self, il_self);
          }
          const int64_t slot = ((b * h + head) * max_steps + t) * dk;
          std::copy(k, k + dk, kc + slot); std::copy(v, v + dk, vc + slot);
        }
      }
      attention(B, wd, kc, vc, t + 1, max_steps * dk, nullptr, 0, A);
      linear(a, T[1], y);
      residual(g(3));
      //@ part: step_cross
      // cross-attention: LN → W_q (→ RoPE at t) → attend to the source's keys and values
      norm(A, g(14), g(15), eps[3 * l + 1]);
      linear(a, T[2], d_out);
      const float* bcq = g(5);
      for (int64_t b = 0; b < rows; ++b) {
        float* r = B + b * wd;
        for (int64_t i = 0; i < d; ++i) r[i] += bcq[i];
        if (r2_cross)
          for (int64_t head = 0; head < h; ++head)
            rope_row(r + head * dk, cc, sc_, r2_cross, il_cross);
      }
      attention(B, wd, ck[l].data_ptr<float>(), cv[l].data_ptr<float>(), S, S * dk,
                mask_bias.defined() ? mask_bias.data_ptr<float>() : nullptr, S, A);
      linear(a, T[3], y);
      residual(g(7));
      //@ part: step_ff
      // feed-forward: LN → W_1 → ReLU → W_2
      norm(A, g(16), g(17), eps[3 * l + 2]);
      linear(a, T[4], f_out);
      const float* b1 = g(9);
      for (int64_t b = 0; b < rows; ++b) {
        float* r = B + b * wd;
        for (int64_t i = 0; i < f; ++i) r[i] = std::max(r[i] + b1[i], 0.f);
      }
      linear(f_out, T[5], y);
      residual(g(11));
    }
    norm(Y, fin_g.data_ptr<float>(), fin_b.data_ptr<float>(), eps.back());
    linear(y, wt.back(), logits);   // the output projection is E
  }

  //@ part: step_entry
  // Row t of a (n, r2) cos or sin table given from Python (null when r2 is 0: no RoPE).
  static const float* table_row(const std::optional<Tensor>& c, int64_t r2, int64_t t) {
    if (r2 == 0) return nullptr;
    check(c && c->defined() && c->device().is_cpu() && c->scalar_type() == at::kFloat &&
              c->is_contiguous() && c->dim() == 2 && c->size(1) == r2 && c->size(0) > t,
          "cos/sin must be contiguous float32 CPU tables of (more than t, rotary_dim/2)");
    return c->data_ptr<float>() + t * r2;
  }

  void check_t(int64_t t) {
    check(ck.size() == (size_t)n_layers, "set_cross must be called before decoding");
    check(t >= 0 && t < max_steps, "t must be in [0, " + std::to_string(max_steps) + ")");
    if (pe.defined()) check(t < pe.size(0), "t is beyond the sinusoidal table");
  }

  // Python's step: tokens (rows,) int64; the tables' row t is position t.
  Tensor step(const Tensor& tokens, int64_t t, const std::optional<Tensor>& cos_self,
              const std::optional<Tensor>& sin_self, const std::optional<Tensor>& cos_cross,
              const std::optional<Tensor>& sin_cross) {
    check_t(t);
    check(tokens.device().is_cpu() && tokens.scalar_type() == at::kLong && tokens.dim() == 1 &&
              tokens.size(0) == rows, "tokens must be a (rows,) int64 CPU tensor");
    Tensor logits = at::empty({rows, vocab}, embed.options());
    run_step(tokens.data_ptr<int64_t>(), tokens.stride(0), t, table_row(cos_self, r2_self, t),
             table_row(sin_self, r2_self, t), table_row(cos_cross, r2_cross, t),
             table_row(sin_cross, r2_cross, t), logits);
    return logits;
  }
};

//@ part: binding
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  pybind11::class_<NativeDecoder>(m, "NativeDecoder")
      .def(pybind11::init<std::vector<Tensor>, std::vector<double>, std::vector<Tensor>, Tensor,
                          std::optional<Tensor>, Tensor, Tensor, int64_t, int64_t, bool, int64_t,
                          bool>())
      .def("set_cross", &NativeDecoder::set_cross)
      .def("step", &NativeDecoder::step);
}
