//@ part: header
// rope_lit's native CPU kernel: q and k rotated in one pass over memory, in one OpenMP region.
// Both pairings, partial rotation, positions (seq,) / (batch, seq), offsets (int and per batch
// row), storage in float32/float64/bfloat16/float16 with float32 math (float64 for float64), in
// place or not, and autograd in C++.
//
// Built on first use by rope_lit.cpp_build (torch.utils.cpp_extension.load_inline). The `//@ part:`
// comments cut the file into the parts that the kernels page shows, with prose between them.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/python.h>
#include <ATen/Parallel.h>
#include <ATen/OpMathType.h>
#include <ATen/MemoryOverlap.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

using torch::Tensor;
using OptTensor = std::optional<Tensor>;

//@ part: rotate_row
// One row of x (head_dim features) rotated into o, by θ or, with CONJ, by -θ. R2C > 0 makes r/2 a
// compile-time constant, so the loop unrolls and vectorises without remainder code. o may be x
// (in place): each pair is read before it is written, and no pair is read after another pair's
// write, so `ivdep` (no loop-carried dependence) holds.
template <typename T, typename TC, bool IL, int R2C, bool CONJ>
static inline void rotate_row(const T* x, T* o, const TC* c, const TC* s, int64_t r2_runtime) {
  using M = at::opmath_type<T>;
  const int64_t r2 = R2C > 0 ? R2C : r2_runtime;
  int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
  if constexpr (IL && std::is_same_v<T, float> && std::is_same_v<TC, float>) {
    // Interleaved float32 with AVX2: 4 pairs per step. The compiler's own vectorisation of the
    // strided pair loop needs several shuffles per vector; here one in-lane swap of the pairs and
    // one fused multiply-add/subtract.
    const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    for (; i + 4 <= r2; i += 4) {
      const __m256 v = _mm256_loadu_ps(x + 2 * i);                   // a0 b0 a1 b1 …
      const __m256 cd =                                              // c0 c0 c1 c1 …
          _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(c + i)), dup);
      const __m256 sd =
          _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(s + i)), dup);
      const __m256 swapped_s =                                       // b0·s0 a0·s0 b1·s1 a1·s1 …
          _mm256_mul_ps(_mm256_permute_ps(v, 0xB1), sd);
      // even lanes a·c ∓ b·s, odd lanes b·c ± a·s
      _mm256_storeu_ps(o + 2 * i, CONJ ? _mm256_fmsubadd_ps(v, cd, swapped_s)
                                       : _mm256_fmaddsub_ps(v, cd, swapped_s));
    }
  }
#endif
  // interleaved: pair (2i, 2i+1); split: pair (i, i + r/2)
  constexpr int64_t step = IL ? 2 : 1;
  const int64_t other = IL ? 1 : r2;
#pragma GCC ivdep
  for (; i < r2; ++i) {
    const M a = static_cast<M>(x[step * i]), b = static_cast<M>(x[step * i + other]);
    const M cc = static_cast<M>(c[i]), ss = CONJ ? -static_cast<M>(s[i]) : static_cast<M>(s[i]);
    o[step * i] = static_cast<T>(a * cc - b * ss);
    o[step * i + other] = static_cast<T>(b * cc + a * ss);
  }
}

//@ part: rotate_range
// heads rotated together at each position: their table row is loaded once
constexpr int64_t HEADS_PER_PASS = 2;

struct Geometry {              // what every row needs; the units of q come first, then those of k
  int64_t nq, HQ, HK, GQ, GK, S, D, rows, r2, table_batch_stride, pos_batch_stride, offset;
  const int64_t *qst, *kst, *qost, *kost, *pos, *offsets;
  bool copy_tail;
};

// Units [n0, n1) of the flattened (q units, then k units). A unit is one position of one group of
// HEADS_PER_PASS heads of one batch row, and a thread walks a (batch, head group) run of positions
// in order: each head is a sequential stream through memory, and each cos/sin row is read once per
// group instead of once per head.
template <typename T, typename TC, bool IL, int R2C, bool CONJ>
static void rotate_range(int64_t n0, int64_t n1, const Geometry& g, const T* qp, const T* kp,
                         T* qop, T* kop, const TC* cp, const TC* sp) {
  for (int64_t n = n0; n < n1;) {
    const bool isq = n < g.nq;
    const int64_t m = isq ? n : n - g.nq, H = isq ? g.HQ : g.HK, G = isq ? g.GQ : g.GK;
    const int64_t *st = isq ? g.qst : g.kst, *ost = isq ? g.qost : g.kost;
    int64_t s = m % g.S;
    const int64_t bg = m / g.S, h0 = (bg % G) * HEADS_PER_PASS, b = bg / G;
    const int64_t h1 = std::min(H, h0 + HEADS_PER_PASS);
    const int64_t s_end = std::min(g.S, s + (std::min(n1, isq ? g.nq : n1) - n));
    const T* x = (isq ? qp : kp) + b * st[0];
    T* o = (isq ? qop : kop) + b * ost[0];
    const TC *cb = cp + b * g.table_batch_stride, *sb = sp + b * g.table_batch_stride;
    const int64_t* pb = g.pos ? g.pos + b * g.pos_batch_stride : nullptr;
    const int64_t shift = g.offset + (g.offsets ? g.offsets[b] : 0);
    for (; s < s_end; ++s, ++n) {
      const int64_t r = (pb ? pb[s] : s) + shift;   // checked by `rotate` before any row is written
      const TC *crow = cb + r * g.r2, *srow = sb + r * g.r2;
      for (int64_t h = h0; h < h1; ++h) {
        const T* xr = x + h * st[1] + s * st[2];
        T* orow = o + h * ost[1] + s * ost[2];
        rotate_row<T, TC, IL, R2C, CONJ>(xr, orow, crow, srow, g.r2);
        if (g.copy_tail) for (int64_t i = 2 * g.r2; i < g.D; ++i) orow[i] = xr[i];
      }
    }
  }
}

//@ part: checks
static Tensor as_long(const Tensor& t, const char* name, int64_t batch) {
  TORCH_CHECK_TYPE(!t.is_floating_point() && !t.is_complex() && t.scalar_type() != at::kBool,
                   name, " must be an integer tensor, got ", t.scalar_type());
  TORCH_CHECK_VALUE(t.device().is_cpu(), name, " must be on the CPU, got ", t.device());
  return t.to(at::kLong).contiguous();
}

// `positions` ((seq,) or (batch, seq)) and per-row `offsets` ((batch,)) as checked int64 tensors;
// undefined where not given.
static void row_args(const OptTensor& positions, const OptTensor& offsets, int64_t B, int64_t S,
                     Tensor& pos, Tensor& offs) {
  if (positions) {
    pos = as_long(*positions, "positions", B);
    TORCH_CHECK_VALUE((pos.dim() == 1 && pos.size(0) == S)
                          || (pos.dim() == 2 && pos.size(1) == S
                              && (pos.size(0) == 1 || pos.size(0) == B)),
                      "positions must be (seq,) or (batch, seq) = (", S, ",) or (", B, ", ", S,
                      "), got ", pos.sizes());
  }
  if (offsets) {
    offs = as_long(*offsets, "offset", B);
    TORCH_CHECK_VALUE(offs.numel() == B && offs.dim() <= 1,
                      "offset must be an int or an integer tensor (batch,) = (", B,
                      ",), got shape ", offs.sizes());
  }
}

static std::vector<Tensor> rotate(const Tensor& q_in, const Tensor& k_in, const Tensor& cos_in,
                                  const Tensor& sin_in, const OptTensor& positions,
                                  const OptTensor& offsets, int64_t offset, bool interleaved,
                                  bool conjugate, bool inplace) {
  // a forward-mode tangent (level 0, the one PyTorch's own formulas read) would be dropped: the caller
  // catches this error and takes the plain formula, which carries it
  TORCH_CHECK(!q_in._fw_grad(0).defined() && !k_in._fw_grad(0).defined() && !cos_in._fw_grad(0).defined()
                  && !sin_in._fw_grad(0).defined(),
              "rope_lit: q, k, cos or sin carries a forward-mode tangent, which the native kernel does not compute");
  TORCH_CHECK_VALUE(q_in.dim() == 4,
                    "q must be a 4-d tensor (batch, heads, seq, head_dim), got ", q_in.sizes());
  TORCH_CHECK_VALUE(k_in.dim() == 4,
                    "k must be a 4-d tensor (batch, heads, seq, head_dim), got ", k_in.sizes());
  TORCH_CHECK_TYPE(q_in.is_floating_point() && k_in.is_floating_point(),
                   "q and k must be floating-point tensors, got ", q_in.scalar_type(), " and ",
                   k_in.scalar_type());
  TORCH_CHECK_VALUE(q_in.device().is_cpu() && k_in.device().is_cpu() && cos_in.device().is_cpu()
                        && sin_in.device().is_cpu(),
                    "the native kernel runs on the CPU: q, k, cos and sin are on ", q_in.device(),
                    ", ", k_in.device(), ", ", cos_in.device(), ", ", sin_in.device());
  const int64_t B = q_in.size(0), S = q_in.size(2), D = q_in.size(3);
  TORCH_CHECK_VALUE(D > 0, "q and k need a head_dim > 0, got q ", q_in.sizes());
  TORCH_CHECK_VALUE(k_in.size(0) == B && k_in.size(2) == S && k_in.size(3) == D,
                    "k must match q in batch, seq and head_dim: q ", q_in.sizes(), ", k ",
                    k_in.sizes());
  TORCH_CHECK_VALUE(cos_in.sizes() == sin_in.sizes(),
                    "sin must have the shape of cos ", cos_in.sizes(), ", got ", sin_in.sizes());
  TORCH_CHECK_VALUE(cos_in.dim() == 2 || cos_in.dim() == 3,
                    "cos must be (rows, r/2) or (batch, seq, r/2), got ", cos_in.sizes());
  const int64_t r2 = cos_in.size(-1), rows = cos_in.size(-2);
  TORCH_CHECK_VALUE(2 * r2 <= D,
                    "cos has ", r2, " columns: rotary_dim ", 2 * r2, " > head_dim ", D);
  TORCH_CHECK_VALUE(cos_in.dim() == 2 || cos_in.size(0) == 1 || cos_in.size(0) == B,
                    "cos of shape ", cos_in.sizes(), " has ", cos_in.size(0),
                    " batch rows for batch ", B);
  TORCH_CHECK_VALUE(!(positions && cos_in.dim() == 3),
                    "positions index a 2-d (table_len, r/2) cos table, got cos of shape ",
                    cos_in.sizes());

  // q and k of different dtypes: rotate both in the wider one, then cast each back (the same
  // math, one pass each).
  if (q_in.scalar_type() != k_in.scalar_type()) {
    const auto wide = at::promote_types(q_in.scalar_type(), k_in.scalar_type());
    auto out = rotate(q_in.to(wide), k_in.to(wide), cos_in, sin_in, positions, offsets, offset,
                      interleaved, conjugate, false);
    if (inplace) return {q_in.copy_(out[0]), k_in.copy_(out[1])};
    return {out[0].to(q_in.scalar_type()), out[1].to(k_in.scalar_type())};
  }
  // A last dimension that is not contiguous: rotate a contiguous copy (and copy back when in
  // place). An empty tensor counts as dense: its copy would be itself, again and again.
  auto last_dense = [](const Tensor& t) {
    return t.stride(3) == 1 || t.size(3) == 1 || t.numel() == 0;
  };
  if (!last_dense(q_in) || !last_dense(k_in)) {
    auto out = rotate(last_dense(q_in) ? q_in : q_in.contiguous(),
                      last_dense(k_in) ? k_in : k_in.contiguous(),
                      cos_in, sin_in, positions, offsets, offset, interleaved, conjugate, false);
    if (inplace) return {q_in.copy_(out[0]), k_in.copy_(out[1])};
    return out;
  }
  const Tensor& q = q_in; const Tensor& k = k_in;
  const auto table_type = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const Tensor cos = cos_in.to(table_type).contiguous(), sin = sin_in.to(table_type).contiguous();
  Tensor pos, offs;
  row_args(positions, offsets, B, S, pos, offs);
  //@ part: row_check
  // Every row index is checked before anything is written, so a bad one never leaves q and k
  // half rotated.
  {
    const int64_t* pp = pos.defined() ? pos.data_ptr<int64_t>() : nullptr;
    const int64_t* op = offs.defined() ? offs.data_ptr<int64_t>() : nullptr;
    const int64_t pbs = pos.defined() && pos.dim() == 2 && pos.size(0) > 1 ? S : 0;
    for (int64_t b = 0; b < (pp || op ? B : std::min<int64_t>(B, 1)); ++b) {
      int64_t shift = 0;
      TORCH_CHECK_INDEX(!__builtin_add_overflow(offset, op ? op[b] : 0, &shift), "offset ", offset,
                        " plus the offset of batch row ", b, " overflows a 64-bit integer");
      for (int64_t s = 0; s < S; ++s) {
        int64_t r = 0;   // the sum checked for overflow too: no index wraps around into the table
        TORCH_CHECK_INDEX(!__builtin_add_overflow(pp ? pp[b * pbs + s] : s, shift, &r), "position ",
                          pp ? pp[b * pbs + s] : s, " plus offset ", shift,
                          " overflows a 64-bit integer");
        TORCH_CHECK_INDEX(r >= 0 && r < rows, "position ", r,
                          " (after offsets) is outside the cos/sin table of ", rows, " rows");
        // default rows are s + shift: the first and the last decide
        if (!pp && s == 0 && S > 1) s = S - 2;
      }
    }
  }
  if (inplace) {   // no element written twice, nor q written through k
    at::assert_no_internal_overlap(q);
    at::assert_no_internal_overlap(k);
    at::assert_no_overlap(q, k);
  }
  //@ part: dispatch
  Tensor qo = inplace ? q : at::empty_like(q), ko = inplace ? k : at::empty_like(k);
  const int64_t qst[3] = {q.stride(0), q.stride(1), q.stride(2)};
  const int64_t kst[3] = {k.stride(0), k.stride(1), k.stride(2)};
  const int64_t qost[3] = {qo.stride(0), qo.stride(1), qo.stride(2)};
  const int64_t kost[3] = {ko.stride(0), ko.stride(1), ko.stride(2)};
  const int64_t GQ = (q.size(1) + HEADS_PER_PASS - 1) / HEADS_PER_PASS;
  const int64_t GK = (k.size(1) + HEADS_PER_PASS - 1) / HEADS_PER_PASS;
  const Geometry g{B * GQ * S, q.size(1), k.size(1), GQ, GK, S, D, rows, r2,
                   cos.dim() == 3 && cos.size(0) > 1 ? rows * r2 : 0,
                   pos.defined() && pos.dim() == 2 && pos.size(0) > 1 ? S : 0, offset,
                   qst, kst, qost, kost, pos.defined() ? pos.data_ptr<int64_t>() : nullptr,
                   offs.defined() ? offs.data_ptr<int64_t>() : nullptr, !inplace && 2 * r2 < D};
  const int64_t total = g.nq + B * GK * S;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, q.scalar_type(),
                                  "rope_lit_native_rotate", [&] {
    using TC = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    const scalar_t *qp = q.const_data_ptr<scalar_t>(), *kp = k.const_data_ptr<scalar_t>();
    scalar_t *qop = qo.data_ptr<scalar_t>(), *kop = ko.data_ptr<scalar_t>();
    const TC *cp = cos.const_data_ptr<TC>(), *sp = sin.const_data_ptr<TC>();
    auto run = [&](auto il, auto r2c, auto conj) {
      constexpr bool IL = decltype(il)::value, CONJ = decltype(conj)::value;
      constexpr int R2C = decltype(r2c)::value;
      // ~16K elements per task at least: below that one thread does it all and no thread is woken
      const int64_t grain = std::max<int64_t>(1, 16384 / (D * HEADS_PER_PASS));
      at::parallel_for(0, total, grain, [&](int64_t n0, int64_t n1) {
        rotate_range<scalar_t, TC, IL, R2C, CONJ>(n0, n1, g, qp, kp, qop, kop, cp, sp);
      });
    };
    auto by_r2 = [&](auto il, auto conj) {
      if (r2 == 64) run(il, std::integral_constant<int, 64>{}, conj);
      else if (r2 == 32) run(il, std::integral_constant<int, 32>{}, conj);
      else if (r2 == 16) run(il, std::integral_constant<int, 16>{}, conj);
      else run(il, std::integral_constant<int, 0>{}, conj);
    };
    auto by_conj = [&](auto il) {
      if (conjugate) by_r2(il, std::true_type{}); else by_r2(il, std::false_type{});
    };
    if (interleaved) by_conj(std::true_type{}); else by_conj(std::false_type{});
  });
  if (inplace) {   // as torch's own in-place ops do: autograd then refuses a tensor saved before
    q.unsafeGetTensorImpl()->bump_version();
    k.unsafeGetTensorImpl()->bump_version();
  }
  return {qo, ko};
}

//@ part: entry_points
// The forward without autograd (inference, and in place). The GIL is released: nothing here
// touches Python.
std::vector<Tensor> rotary_qk_forward(const Tensor& q, const Tensor& k, const Tensor& cos,
                                      const Tensor& sin, const OptTensor& positions,
                                      const OptTensor& offsets, int64_t offset, bool interleaved,
                                      bool conjugate, bool inplace) {
  pybind11::gil_scoped_release no_gil;
  return rotate(q, k, cos, sin, positions, offsets, offset, interleaved, conjugate, inplace);
}

// Autograd in C++, so a backward costs no Python: the gradient of a rotation by θ is the rotation
// by -θ of the incoming gradient, itself this differentiable op (so double backward works), and
// nothing is saved but cos/sin and the rows.
struct RotaryQK : public torch::autograd::Function<RotaryQK> {
  static torch::autograd::variable_list forward(
      torch::autograd::AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& cos,
      const Tensor& sin, const OptTensor& positions, const OptTensor& offsets, int64_t offset,
      bool interleaved, bool conjugate) {
    ctx->save_for_backward({cos, sin, positions.value_or(Tensor()), offsets.value_or(Tensor())});
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["interleaved"] = interleaved;
    ctx->saved_data["conjugate"] = conjugate;
    return rotate(q, k, cos, sin, positions, offsets, offset, interleaved, conjugate, false);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto opt = [](const Tensor& t) { return t.defined() ? OptTensor(t) : std::nullopt; };
    auto& d = ctx->saved_data;
    auto out = RotaryQK::apply(grads[0], grads[1], saved[0], saved[1], opt(saved[2]),
                               opt(saved[3]), d["offset"].toInt(), d["interleaved"].toBool(),
                               !d["conjugate"].toBool());
    return {out[0], out[1], Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

std::vector<Tensor> rotary_qk_autograd(const Tensor& q, const Tensor& k, const Tensor& cos,
                                       const Tensor& sin, const OptTensor& positions,
                                       const OptTensor& offsets, int64_t offset,
                                       bool interleaved) {
  pybind11::gil_scoped_release no_gil;
  return RotaryQK::apply(q, k, cos, sin, positions, offsets, offset, interleaved, false);
}

//@ part: copy_floor
// The benchmark's autograd floor: the same one C++ autograd node, with copies for rotations
// (forward and backward).
struct CopyQK : public torch::autograd::Function<CopyQK> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const Tensor& q, const Tensor& k) {
    return {q.clone(), k.clone()};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {grads[0].clone(), grads[1].clone()};
  }
};

std::vector<Tensor> copy_qk_autograd(const Tensor& q, const Tensor& k) {
  pybind11::gil_scoped_release no_gil;
  return CopyQK::apply(q, k);
}

//@ part: append_loop
// Rotate-and-append: the new queries rotated into a new tensor, the new keys rotated straight into
// the key cache and the values copied into the value cache, all at slots offset[b] + s.
struct AppendGeometry {        // the rows of q come first, then those of k (each also moves v)
  int64_t nq, HQ, HK, S, D, Dv, r2, table_batch_stride, pos_batch_stride, offset;
  const int64_t *qst, *kst, *vst, *qost, *kcst, *vcst, *pos, *offsets;
  bool rows_per_token;         // cos is (batch, seq, r/2): row s of batch row b, not a table
};

// Rows [n0, n1) of the flattened (q rows, then k rows); a row is (batch row, head, position).
template <typename T, typename TC, bool IL, int R2C>
static void append_range(int64_t n0, int64_t n1, const AppendGeometry& g, const T* qp,
                         const T* kp, const T* vp, T* qop, T* kcp, T* vcp, const TC* cp,
                         const TC* sp) {
  for (int64_t n = n0; n < n1; ++n) {
    const bool isq = n < g.nq;
    const int64_t m = isq ? n : n - g.nq, H = isq ? g.HQ : g.HK;
    const int64_t s = m % g.S, h = (m / g.S) % H, b = m / (g.S * H);
    const int64_t slot = g.offset + (g.offsets ? g.offsets[b] : 0) + s;   // checked before
    const int64_t r = g.pos ? g.pos[b * g.pos_batch_stride + s] : g.rows_per_token ? s : slot;
    const TC* crow = cp + b * g.table_batch_stride + r * g.r2;
    const TC* srow = sp + b * g.table_batch_stride + r * g.r2;
    const int64_t *st = isq ? g.qst : g.kst, *ost = isq ? g.qost : g.kcst;
    const T* x = (isq ? qp : kp) + b * st[0] + h * st[1] + s * st[2];
    T* o = isq ? qop + b * ost[0] + h * ost[1] + s * ost[2]      // q: a new tensor
               : kcp + b * ost[0] + h * ost[1] + slot * ost[2];  // k: its cache slot
    rotate_row<T, TC, IL, R2C, false>(x, o, crow, srow, g.r2);
    for (int64_t i = 2 * g.r2; i < g.D; ++i) o[i] = x[i];
    if (!isq) {                                                  // v: copied to its slot
      const T* vx = vp + b * g.vst[0] + h * g.vst[1] + s * g.vst[2];
      T* vo = vcp + b * g.vcst[0] + h * g.vcst[1] + slot * g.vcst[2];
      for (int64_t i = 0; i < g.Dv; ++i) vo[i] = vx[i];
    }
  }
}

//@ part: append_checks
// Checked before anything is written: the shapes, the cache slots of every batch row and every
// cos/sin row, so a bad offset leaves the caches as they were.
Tensor rotary_append(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                     const Tensor& k_cache, const Tensor& v_cache, const Tensor& cos_in,
                     const Tensor& sin_in, const OptTensor& positions, const OptTensor& offsets,
                     int64_t offset, bool interleaved) {
  pybind11::gil_scoped_release no_gil;
  // as in `rotate`: a forward-mode tangent would be dropped (the caches' too); the caller takes the
  // plain formula, which carries it
  for (const Tensor* t : {&q_in, &k_in, &v_in, &k_cache, &v_cache, &cos_in, &sin_in})
    TORCH_CHECK(!t->_fw_grad(0).defined(), "rope_lit: q, k, v, a cache, cos or sin carries a "
                "forward-mode tangent, which the native kernel does not compute");
  for (const Tensor* t : {&q_in, &k_in, &v_in, &k_cache, &v_cache})
    TORCH_CHECK_VALUE(t->dim() == 4, "q, k, v and the caches must be 4-d tensors, got ",
                      t->sizes());
  const int64_t B = q_in.size(0), S = q_in.size(2), D = q_in.size(3), HK = k_in.size(1);
  const int64_t L = k_cache.size(2), Dv = v_in.size(3);
  TORCH_CHECK_VALUE(k_in.size(0) == B && k_in.size(2) == S && k_in.size(3) == D
                        && v_in.sizes().slice(0, 3) == k_in.sizes().slice(0, 3),
                    "k and v must be (batch, kv_heads, seq, .) matching q ", q_in.sizes(),
                    ": got k ", k_in.sizes(), ", v ", v_in.sizes());
  TORCH_CHECK_VALUE(k_cache.size(0) == B && k_cache.size(1) == HK && k_cache.size(3) == D
                        && v_cache.size(0) == B && v_cache.size(1) == HK
                        && v_cache.size(2) == L && v_cache.size(3) == Dv,
                    "the caches must be (batch, kv_heads, max_len, .) matching k and v: got ",
                    k_cache.sizes(), " and ", v_cache.sizes());
  const auto dt = q_in.scalar_type();
  TORCH_CHECK_TYPE(at::isFloatingType(dt) && k_in.scalar_type() == dt && v_in.scalar_type() == dt
                       && k_cache.scalar_type() == dt && v_cache.scalar_type() == dt,
                   "q, k, v and the caches must share one floating dtype, got ", dt, ", ",
                   k_in.scalar_type(), ", ", v_in.scalar_type(), ", ", k_cache.scalar_type(),
                   ", ", v_cache.scalar_type());
  for (const Tensor* t : {&q_in, &k_in, &v_in, &k_cache, &v_cache, &cos_in, &sin_in})
    TORCH_CHECK_VALUE(t->device().is_cpu(), "the native kernel runs on the CPU, got a tensor on ",
                      t->device());
  TORCH_CHECK_VALUE(k_cache.stride(3) == 1 && v_cache.stride(3) == 1,
                    "the caches need a contiguous last dimension");
  TORCH_CHECK_VALUE(cos_in.sizes() == sin_in.sizes(),
                    "sin must have the shape of cos ", cos_in.sizes(), ", got ", sin_in.sizes());
  TORCH_CHECK_VALUE(cos_in.dim() == 2 || (cos_in.dim() == 3 && !positions
                                          && (cos_in.size(0) == 1 || cos_in.size(0) == B)
                                          && cos_in.size(1) == S),
                    "cos must be a (table_len, r/2) table, or (batch, seq, r/2) rows without "
                    "positions, got ", cos_in.sizes());
  const int64_t r2 = cos_in.size(-1), rows = cos_in.size(-2);
  TORCH_CHECK_VALUE(2 * r2 <= D, "cos has ", r2, " columns: rotary_dim ", 2 * r2, " > head_dim ",
                    D);
  Tensor pos, offs;
  row_args(positions, offsets, B, S, pos, offs);
  const int64_t* pp = pos.defined() ? pos.data_ptr<int64_t>() : nullptr;
  const int64_t* op = offs.defined() ? offs.data_ptr<int64_t>() : nullptr;
  const int64_t pbs = pos.defined() && pos.dim() == 2 && pos.size(0) > 1 ? S : 0;
  for (int64_t b = 0; b < B; ++b) {                 // the slots first, then the table rows
    // written so that nothing overflows: first + S <= L as first <= L - S (S <= L checked first)
    int64_t first = 0;
    TORCH_CHECK_INDEX(!__builtin_add_overflow(offset, op ? op[b] : 0, &first), "offset ", offset,
                      " plus the offset of batch row ", b, " overflows a 64-bit integer");
    TORCH_CHECK_INDEX(first >= 0 && S <= L && first <= L - S, "offset ", first, " of batch row ", b,
                      ": slots ", first, "..",
                      first > INT64_MAX - S ? std::string("past 2^63") : std::to_string(first + S - 1),
                      " are outside the cache of max_len ", L);
  }
  for (int64_t b = 0; b < B && cos_in.dim() == 2; ++b) {
    for (int64_t s = 0; s < S; ++s) {
      const int64_t r = pp ? pp[b * pbs + s] : offset + (op ? op[b] : 0) + s;
      TORCH_CHECK_INDEX(r >= 0 && r < rows, "position ", r,
                        " (after offsets) is outside the cos/sin table of ", rows, " rows");
    }
  }
  at::assert_no_internal_overlap(k_cache);
  at::assert_no_internal_overlap(v_cache);
  at::assert_no_overlap(k_cache, v_cache);
  //@ part: append_dispatch
  auto dense = [](const Tensor& t) { return t.stride(3) == 1 ? t : t.contiguous(); };
  const Tensor q = dense(q_in), k = dense(k_in), v = dense(v_in);
  const auto table_type = dt == at::kDouble ? at::kDouble : at::kFloat;
  const Tensor cos = cos_in.to(table_type).contiguous(), sin = sin_in.to(table_type).contiguous();
  Tensor qo = at::empty_like(q);
  const int64_t qst[3] = {q.stride(0), q.stride(1), q.stride(2)};
  const int64_t kst[3] = {k.stride(0), k.stride(1), k.stride(2)};
  const int64_t vst[3] = {v.stride(0), v.stride(1), v.stride(2)};
  const int64_t qost[3] = {qo.stride(0), qo.stride(1), qo.stride(2)};
  const int64_t kcst[3] = {k_cache.stride(0), k_cache.stride(1), k_cache.stride(2)};
  const int64_t vcst[3] = {v_cache.stride(0), v_cache.stride(1), v_cache.stride(2)};
  const AppendGeometry g{B * q.size(1) * S, q.size(1), HK, S, D, Dv, r2,
                         cos.dim() == 3 && cos.size(0) > 1 ? rows * r2 : 0, pbs, offset,
                         qst, kst, vst, qost, kcst, vcst, pp, op, cos.dim() == 3};
  const int64_t total = g.nq + B * HK * S;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, dt, "rope_lit_native_append", [&] {
    using TC = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    const scalar_t *qp = q.const_data_ptr<scalar_t>(), *kp = k.const_data_ptr<scalar_t>();
    const scalar_t* vp = v.const_data_ptr<scalar_t>();
    scalar_t *qop = qo.data_ptr<scalar_t>(), *kcp = k_cache.data_ptr<scalar_t>();
    scalar_t* vcp = v_cache.data_ptr<scalar_t>();
    const TC *cp = cos.const_data_ptr<TC>(), *sp = sin.const_data_ptr<TC>();
    auto run = [&](auto il, auto r2c) {
      constexpr bool IL = decltype(il)::value;
      constexpr int R2C = decltype(r2c)::value;
      const int64_t grain = std::max<int64_t>(1, 16384 / (D + Dv));
      at::parallel_for(0, total, grain, [&](int64_t n0, int64_t n1) {
        append_range<scalar_t, TC, IL, R2C>(n0, n1, g, qp, kp, vp, qop, kcp, vcp, cp, sp);
      });
    };
    auto by_r2 = [&](auto il) {
      if (r2 == 64) run(il, std::integral_constant<int, 64>{});
      else if (r2 == 32) run(il, std::integral_constant<int, 32>{});
      else run(il, std::integral_constant<int, 0>{});
    };
    if (interleaved) by_r2(std::true_type{}); else by_r2(std::false_type{});
  });
  k_cache.unsafeGetTensorImpl()->bump_version();   // written in place, as torch's own ops do
  v_cache.unsafeGetTensorImpl()->bump_version();
  return qo;
}
