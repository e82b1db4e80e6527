// Attention of a few query rows over a long bf16 cache, for a decode or verify step on the CPU
// (engine.decode.fast_attention). Each (row of the batch, KV head) reads its keys and values once, as bf16: scores
// by AVX-512 BF16 dot products (fp32 sums, as SDPA's), softmax in fp32, the values summed in fp32 registers. SDPA's
// flash kernel tiles for long queries and read the cache at about 7 GB/s in a decode step (AMD EPYC Zen 4, 31 GB/s
// to DRAM); this reads it at about 17 (8 rows of 711 columns, 30 layers of SmolLM2 in 7.5-8.2 ms, 2026-12-06).
// Below it, the step's RMSNorm and RoPE as one call each.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <vector>

#if !defined(__AVX512F__) || !defined(__AVX512BF16__) || !defined(__AVX512BW__) || !defined(__AVX512VL__)
#error "needs AVX-512 with BF16, BW and VL (the caller falls back to SDPA)"
#endif

namespace {

inline uint16_t narrow(float f) {  // round to nearest even, as torch's bf16 conversion does (no NaN reaches here)
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float widen(uint16_t h) {  // a bf16 as the fp32 it is exactly
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

#include "attention_parts.h"

}  // namespace

#include "amx_gemm.h"  // after narrow and widen, which it uses

// q [B, KV, R, D] bf16 contiguous (row r of head h is query head h * R / n + ..., token r % n); k, v [B, KV, S, D]
// bf16 with unit stride in D; mask [B or 1, n, S] bool (true: attend; query row r reads mask row r % n) or empty
// (every column). Returns [B, KV, R, D] bf16.
torch::Tensor decode_attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor mask, double scale) {
  TORCH_CHECK(q.scalar_type() == at::kBFloat16 && k.scalar_type() == at::kBFloat16 && v.scalar_type() == at::kBFloat16,
              "bf16 only");
  TORCH_CHECK(q.is_contiguous() && k.stride(3) == 1 && v.stride(3) == 1, "unit stride in the head dimension");
  const int64_t B = q.size(0), KV = q.size(1), R = q.size(2), D = q.size(3), S = k.size(2);
  TORCH_CHECK(D % 32 == 0 && D <= 256, "head dimension a multiple of 32, at most 256");
  TORCH_CHECK(k.size(0) == B && k.size(1) == KV && k.size(3) == D && v.sizes() == k.sizes(), "cache shape");
  const bool masked = mask.numel() > 0;
  int64_t mb = 0, rows = 1;
  const uint8_t* mp = nullptr;
  if (masked) {
    TORCH_CHECK(mask.scalar_type() == at::kBool && mask.is_contiguous() && mask.dim() == 3 && mask.size(2) == S,
                "mask [B or 1, n, S] bool");
    rows = mask.size(1);
    mb = mask.size(0) == 1 ? 0 : rows * S;
    mp = reinterpret_cast<const uint8_t*>(mask.data_ptr<bool>());
  }
  auto out = torch::empty({B, KV, R, D}, q.options());
  const auto* qp = reinterpret_cast<const uint16_t*>(q.data_ptr<at::BFloat16>());
  const auto* kp = reinterpret_cast<const uint16_t*>(k.data_ptr<at::BFloat16>());
  const auto* vp = reinterpret_cast<const uint16_t*>(v.data_ptr<at::BFloat16>());
  auto* op = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  const int64_t k0 = k.stride(0), k1 = k.stride(1), k2 = k.stride(2);
  const int64_t v0 = v.stride(0), v1 = v.stride(1), v2 = v.stride(2);
  const float neg = -1e30f;  // a masked score: finite (built with -ffast-math, which assumes no inf)
  const int64_t pairs = D / 32, lanes = D / 16, Sp = (S + 15) / 16 * 16;
#ifdef PHOENIX_AMX
  const bool tiles = R <= 16 && amx::ready();  // every R alike: a row's scores must not depend on the step's tokens
#else
  const bool tiles = false;
#endif
  at::parallel_for(0, B * KV, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(R * Sp), acc(R * D), total(R);
    std::vector<int64_t> live;
    std::vector<uint16_t> qt(tiles ? D * 16 : 0), tail(tiles ? D * 16 : 0);  // qt zeroed: its columns past R stay 0
    __m512 part[16];
#ifdef PHOENIX_AMX
    if (tiles) amx::configure();
#endif
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / KV, h = task % KV;
      const uint16_t* qb = qp + task * R * D;
      const uint16_t* kb = kp + b * k0 + h * k1;
      if (task == begin || h == 0) live_blocks(masked ? mp + b * mb : nullptr, rows, S, live);
#ifdef PHOENIX_AMX
      if (tiles) {
        std::fill(scores.begin(), scores.end(), neg);  // a dead block's: masked
        amx::scores(qb, R, D, kb, k2, S, live, static_cast<float>(scale), scores.data(), Sp, qt.data(), tail.data());
      }
#endif
      for (int64_t r = 0; r < R && !tiles; ++r) {  // scores: the query row in registers, the keys cached after one
        __m512i query[8];
        for (int64_t c = 0; c < pairs; ++c) query[c] = _mm512_loadu_si512(qb + r * D + 32 * c);
        std::fill(scores.begin() + r * Sp, scores.begin() + (r + 1) * Sp, neg);  // a dead block's: masked
        for (const int64_t s0 : live) {
          const int64_t n = S - s0 < 16 ? S - s0 : 16;
          for (int64_t j = 0; j < 16; ++j) {
            __m512 a = _mm512_setzero_ps();
            for (int64_t c = 0; j < n && c < pairs; ++c)
              a = _mm512_dpbf16_ps(a, (__m512bh)query[c], (__m512bh)_mm512_loadu_si512(kb + (s0 + j) * k2 + 32 * c));
            part[j] = a;
          }
          _mm512_storeu_ps(scores.data() + r * Sp + s0, _mm512_mul_ps(sums16(part), _mm512_set1_ps(scale)));
        }
      }
      for (int64_t r = 0; r < R; ++r) {  // softmax, sixteen columns at a time; the padding past S is masked
        float* sr = scores.data() + r * Sp;
        const uint8_t* m = masked ? mp + b * mb + (r % rows) * S : nullptr;
        __m512 top = _mm512_set1_ps(neg), sum = _mm512_setzero_ps();
        for (int64_t s0 = 0; s0 < Sp; s0 += 16) {
          const int64_t n = S - s0 < 16 ? S - s0 : 16;
          __mmask16 keep = static_cast<__mmask16>(n == 16 ? 0xFFFF : (1u << n) - 1);
          if (m != nullptr) {
            const __m128i bytes = _mm_maskz_loadu_epi8(keep, m + s0);
            keep &= _mm_test_epi8_mask(bytes, bytes);
          }
          const __m512 x = _mm512_mask_blend_ps(keep, _mm512_set1_ps(neg), _mm512_loadu_ps(sr + s0));
          _mm512_storeu_ps(sr + s0, x);
          top = _mm512_max_ps(top, x);
        }
        const __m512 peak = _mm512_set1_ps(_mm512_reduce_max_ps(top));
        for (int64_t s0 = 0; s0 < Sp; s0 += 16) {  // a masked column's: exp(-1e30 - top) = 0
          const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(sr + s0), peak));
          _mm512_storeu_ps(sr + s0, e);
          sum = _mm512_add_ps(sum, e);
        }
        total[r] = _mm512_reduce_add_ps(sum);
      }
      const uint16_t* vb = vp + b * v0 + h * v1;
      const float* sc = scores.data();
      if (lanes == 4) {  // head dimension 64 (SmolLM2) or 128 (Qwen2.5): the sums stay in registers
        if (R == 1) {
          values_all<4, 1>(vb, v2, S, live, sc, Sp, acc.data(), R);
        } else if (R == 2) {
          values_all<4, 2>(vb, v2, S, live, sc, Sp, acc.data(), R);
        } else if (R == 3) {  // SmolLM2's three query heads a KV head: six at a time had computed three twice
          values_all<4, 3>(vb, v2, S, live, sc, Sp, acc.data(), R);
        } else if (R == 4) {
          values_all<4, 4>(vb, v2, S, live, sc, Sp, acc.data(), R);
        } else {
          values_all<4, 6>(vb, v2, S, live, sc, Sp, acc.data(), R);
        }
      } else if (lanes == 8) {
        if (R == 1) {
          values_all<8, 1>(vb, v2, S, live, sc, Sp, acc.data(), R);
        } else if (R == 2) {
          values_all<8, 2>(vb, v2, S, live, sc, Sp, acc.data(), R);
        } else {
          values_all<8, 3>(vb, v2, S, live, sc, Sp, acc.data(), R);
        }
      } else {
        std::fill(acc.begin(), acc.end(), 0.f);
        for (const int64_t s0 : live) {  // values: each row read once for every query row
          for (int64_t s = s0, e = std::min<int64_t>(s0 + 16, S); s < e; ++s) {
            __m512 row[16];
            for (int64_t c = 0; c < lanes; ++c) row[c] = widen16(vb + s * v2 + 16 * c);
            for (int64_t r = 0; r < R; ++r) {
              const __m512 p = _mm512_set1_ps(scores[r * Sp + s]);
              float* ar = acc.data() + r * D;
              for (int64_t c = 0; c < lanes; ++c)
                _mm512_storeu_ps(ar + 16 * c, _mm512_fmadd_ps(p, row[c], _mm512_loadu_ps(ar + 16 * c)));
            }
          }
        }
      }
      uint16_t* ob = op + task * R * D;
      for (int64_t r = 0; r < R; ++r) {
        const float inv = 1.f / total[r];  // the row's own column is always attended: total >= 1
        for (int64_t i = 0; i < D; ++i) ob[r * D + i] = narrow(acc[r * D + i] * inv);
      }
    }
#ifdef PHOENIX_AMX
    if (tiles) _tile_release();
#endif
  });
  return out;
}

namespace {

inline __m512 widen16v(__m256i raw) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16)); }
inline __m256i narrow16(__m512 v) { return (__m256i)_mm512_cvtneps_pbh(v); }  // round to nearest even, as torch

}  // namespace

// The step's two small ops, each one call instead of the six to eight torch ops a layer runs for it (each op's
// dispatch costs more than its arithmetic at a decode step's few rows: 36 and 25 us against about 5).
// rms_norm: transformers' LlamaRMSNorm in bf16: the row in fp32, times rsqrt(mean of squares + eps), rounded to bf16,
// then times the weight (a bf16 product, rounded again). x [..., H] contiguous, w [H], H a multiple of 16.
torch::Tensor rms_norm(torch::Tensor x, torch::Tensor w, double eps) {
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && w.scalar_type() == at::kBFloat16, "bf16 only");
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous(), "contiguous");
  const int64_t H = x.size(-1), N = H ? x.numel() / H : 0;
  TORCH_CHECK(H % 16 == 0 && w.numel() == H, "rows a multiple of 16 wide, one weight each");
  auto out = torch::empty_like(x);
  const auto* xp = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  const auto* wp = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
  auto* op = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  at::parallel_for(0, N, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const uint16_t* row = xp + i * H;
      __m512 sq = _mm512_setzero_ps();
      for (int64_t c = 0; c < H; c += 16) {
        const __m512 v = widen16v(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c)));
        sq = _mm512_fmadd_ps(v, v, sq);
      }
      const float scale = 1.0f / std::sqrt(_mm512_reduce_add_ps(sq) / static_cast<float>(H) + static_cast<float>(eps));
      const __m512 r = _mm512_set1_ps(scale);
      for (int64_t c = 0; c < H; c += 16) {
        const __m512 v = widen16v(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c)));
        const __m512 normed = widen16v(narrow16(_mm512_mul_ps(v, r)));
        const __m512 wv = widen16v(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + c)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(op + i * H + c), narrow16(_mm512_mul_ps(wv, normed)));
      }
    }
  });
  return out;
}

// rotate: RoPE in transformers' rotate-half layout, op for op in bf16 (x*cos and turned*sin each rounded, then
// their sum): the same bits as the torch ops. x [N, heads, d] with unit stride in d (a view of a fused projection
// is fine), cos and sin [N, 1, d] contiguous, d a multiple of 32. Returns [N, heads, d] contiguous.
torch::Tensor rotate(torch::Tensor x, torch::Tensor cos, torch::Tensor sin) {
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && cos.scalar_type() == at::kBFloat16 &&
                  sin.scalar_type() == at::kBFloat16, "bf16 only");
  TORCH_CHECK(x.dim() == 3 && x.stride(2) == 1 && cos.is_contiguous() && sin.is_contiguous(), "layout");
  const int64_t N = x.size(0), heads = x.size(1), d = x.size(2), half = d / 2;
  TORCH_CHECK(d % 32 == 0 && cos.numel() == N * d && sin.numel() == N * d, "d a multiple of 32, one angle a token");
  auto out = torch::empty({N, heads, d}, x.options());
  const auto* xp = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  const auto* cp = reinterpret_cast<const uint16_t*>(cos.data_ptr<at::BFloat16>());
  const auto* sp = reinterpret_cast<const uint16_t*>(sin.data_ptr<at::BFloat16>());
  auto* op = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  const int64_t s0 = x.stride(0), s1 = x.stride(1);
  const __m512i flip = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  at::parallel_for(0, N * heads, 64, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t n = t / heads, h = t % heads;
      const uint16_t* row = xp + n * s0 + h * s1;
      uint16_t* dst = op + t * d;
      for (int64_t c = 0; c < d; c += 16) {
        const bool first = c < half;  // turned = (-x[half:], x[:half])
        const __m512 v = widen16v(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c)));
        __m512 turned = widen16v(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + (first ? c + half : c - half))));
        if (first) turned = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(turned), flip));
        const __m512 cv = widen16v(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(cp + n * d + c)));
        const __m512 sv = widen16v(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sp + n * d + c)));
        const __m512 a = widen16v(narrow16(_mm512_mul_ps(v, cv)));
        const __m512 b = widen16v(narrow16(_mm512_mul_ps(turned, sv)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c), narrow16(_mm512_add_ps(a, b)));
      }
    }
  });
  return out;
}

// linear: y = x w^T (+ b) for a decode step's few rows, bf16 in and out, fp32 sums (x [M, K], w [N, K] as
// nn.Linear keeps it, b [N] or empty; K a multiple of 32). oneDNN's packed GEMM streamed SmolLM2's weights at about
// 19 GB/s at one row (2 cores, Zen 4): a step's linear layers are a few rows against a whole weight, so their cost is
// the weight's stream. Each block of NB weight rows is read once for every row of x, by AVX-512 BF16 dot products; each
// output is one lane-wise sum over K reduced the same way whatever M and NB are, so a row's output does not depend on
// the rows beside it (a verify computes each token as a single step does).
namespace {

#include "avx_gemm.h"

}  // namespace


torch::Tensor linear(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && w.scalar_type() == at::kBFloat16, "bf16 only");
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.is_contiguous() && w.is_contiguous(), "x [M, K], w [N, K] contiguous");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  TORCH_CHECK(w.size(1) == K && K % 32 == 0 && M >= 1, "K a multiple of 32, one row or more");
  TORCH_CHECK(b.numel() == 0 || (b.scalar_type() == at::kBFloat16 && b.numel() == N && b.is_contiguous()), "bias");
  auto y = torch::empty({M, N}, x.options());
  const auto* xp = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  const auto* wp = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
  const auto* bp = b.numel() ? reinterpret_cast<const uint16_t*>(b.data_ptr<at::BFloat16>()) : nullptr;
  auto* yp = reinterpret_cast<uint16_t*>(y.data_ptr<at::BFloat16>());
#ifdef PHOENIX_AMX
  // the tiles take 2 to 16 tokens in one weight stream at about one token's cost; a lone token is cheaper by AVX-512
  // below (tile setup and the tokens' interleaving cost about 10 us a call: 11 against 22 us for SmolLM2's 960 x 576)
  if (M >= 2 && M <= 16 && N % 16 == 0 && amx::ready()) {
    amx::linear(xp, wp, bp, yp, M, K, N);
    return y;
  }
#endif
  if (M <= 2) {
    linear_rows<8>(xp, wp, bp, yp, M, K, N);  // M * NB sums and NB weight vectors within 32 registers
  } else {
    linear_rows<2>(xp, wp, bp, yp, M, K, N);
  }
  return y;
}

// A decoder layer's two halves for a step of a few tokens, each one call: the same ops in the same order as
// Phoenix's runner calls them one by one from Python (rms_norm, linear, rotate above; ATen's silu, product and sum),
// so the same bits. What they save is the interpreter: a layer was about twenty Python-level calls, 4 of a SmolLM2
// one-row step's 16.5 ms went to them and to the small ops between the GEMMs (AMD EPYC Zen 4, 2026-12-06).
// qkv_block: rms_norm(x), its fused q/k/v projection (bias or empty), and the rotary embedding on q and k.
std::vector<torch::Tensor> qkv_block(torch::Tensor x, torch::Tensor norm, double eps, torch::Tensor w, torch::Tensor b,
                                     torch::Tensor cos, torch::Tensor sin, int64_t heads, int64_t kv_heads) {
  const int64_t d = cos.size(-1), qs = heads * d, ks = kv_heads * d;
  TORCH_CHECK(w.size(0) == qs + 2 * ks, "the fused projection is q, k, v");
  auto qkv = linear(rms_norm(x, norm, eps), w, b);
  auto q = qkv.narrow(1, 0, qs).view({-1, heads, d});
  auto k = qkv.narrow(1, qs, ks).view({-1, kv_heads, d});
  auto v = qkv.narrow(1, qs + ks, ks).view({-1, kv_heads, d});
  return {rotate(q, cos, sin), rotate(k, cos, sin), v};
}

// mlp_block: x + down(silu(gate) * up), gate and up the halves of the fused projection of rms_norm(x).
torch::Tensor mlp_block(torch::Tensor x, torch::Tensor norm, double eps, torch::Tensor gate_up, torch::Tensor down,
                        torch::Tensor none) {
  const int64_t inner = gate_up.size(0) / 2;
  TORCH_CHECK(down.size(1) == inner, "gate and up as wide as the down projection's input");
  auto gu = linear(rms_norm(x, norm, eps), gate_up, none);
  auto act = at::silu(gu.narrow(1, 0, inner)) * gu.narrow(1, inner, inner);
  return x + linear(act, down, none);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("qkv_block", &qkv_block);
  m.def("mlp_block", &mlp_block);
  m.def("decode_attention", &decode_attention);
  m.def("rms_norm", &rms_norm);
  m.def("rotate", &rotate);
  m.def("linear", &linear);
#ifdef PHOENIX_AMX
  m.attr("amx") = amx::ready();
#else
  m.attr("amx") = false;
#endif
}
