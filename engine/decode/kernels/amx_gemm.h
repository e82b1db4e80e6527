// y = x @ w.T (+ b) for a step of 1 to 16 tokens by Intel AMX, where the CPU has it (included by decode_attention.cpp).
// The weight is read as it is stored, [N, K] row-major: it is the tiles' left operand (16 of its rows by 32 of its
// columns a tile), so nothing is repacked or copied; the few tokens are the right operand, put in AMX's pair-
// interleaved layout once a call (K * 32 bytes). Each output is one fp32 sum over K in the same order whatever the
// token count, so a token's result is the same to the bit alone or among sixteen. oneDNN's AMX GEMM pays a fixed cost
// a call (about 70-150 us on a 2-core Xeon, against 20-60 us for the whole of a small SmolLM2 weight from cache),
// which a step of 121 GEMMs pays 121 times.
#pragma once

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#include <sys/syscall.h>
#include <unistd.h>

#define PHOENIX_AMX 1

namespace amx {

struct alignas(64) Config {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// The kernel asks Linux for the tile state once a process (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
// where it is refused, the AVX-512 path serves.
inline bool ready() {
  static const bool ok = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  return ok;
}

// Tiles: 0 and 1 the sums of two blocks of 16 weight rows (16 x 16 fp32), 2 and 3 those blocks' 16 x 32 weights,
// 4 the tokens' 16 pairs x 16 columns (zeros past M).
inline void configure() {
  Config c;
  for (int t = 0; t < 5; ++t) {
    c.rows[t] = 16;
    c.colsb[t] = 64;
  }
  _tile_loadconfig(&c);
}

// x [M, K] -> for each block of 32 columns, 16 rows of 16 token pairs: out[kb][r][2 m + p] = x[m][32 kb + 2 r + p];
// ``out`` arrives zeroed (the columns past M stay 0).
inline void interleave(const uint16_t* x, int64_t M, int64_t K, uint16_t* out) {
  for (int64_t kb = 0; kb < K / 32; ++kb)
    for (int64_t r = 0; r < 16; ++r)
      for (int64_t m = 0; m < M; ++m) {
        out[kb * 512 + r * 32 + 2 * m] = x[m * K + kb * 32 + 2 * r];
        out[kb * 512 + r * 32 + 2 * m + 1] = x[m * K + kb * 32 + 2 * r + 1];
      }
}

// Rows n0 .. n0 + 15 of the output's columns from one block of sums (16 weight rows x 16 tokens, fp32).
inline void put(const float* sums, const uint16_t* b, uint16_t* y, int64_t M, int64_t N, int64_t n0) {
  for (int64_t i = 0; i < 16; ++i) {
    const float bias = b != nullptr ? widen(b[n0 + i]) : 0.f;
    for (int64_t m = 0; m < M; ++m) y[m * N + n0 + i] = narrow(sums[i * 16 + m] + bias);
  }
}

// Two blocks of 16 left-operand rows (at ``a0`` and ``a1``, rows ``s0`` and ``s1`` bytes apart) against the right
// operand ``right`` (interleaved, K / 32 tiles of 16 pairs), in tiles 0 and 1 at once: one block's chain of products
// alone waits on its own latency. Each output one fp32 sum over K in one order. The sums land in ``sums``.
inline void two_blocks(const uint16_t* a0, int64_t s0, const uint16_t* a1, int64_t s1, const uint16_t* right,
                       int64_t K, float (*sums)[256]) {
  _tile_zero(0);
  _tile_zero(1);
  for (int64_t kb = 0; kb < K / 32; ++kb) {
    _tile_loadd(4, right + kb * 512, 64);
    _tile_loadd(2, a0 + kb * 32, s0);
    _tile_loadd(3, a1 + kb * 32, s1);
    _tile_dpbf16ps(0, 2, 4);
    _tile_dpbf16ps(1, 3, 4);
  }
  _tile_stored(0, sums[0], 64);
  _tile_stored(1, sums[1], 64);
}

// N a multiple of 16, K of 32, 1 <= M <= 16; x, w, y contiguous.
inline void linear(const uint16_t* x, const uint16_t* w, const uint16_t* b, uint16_t* y, int64_t M, int64_t K,
                   int64_t N) {
  std::vector<uint16_t> tokens(K * 16);  // zeroed
  interleave(x, M, K, tokens.data());
  const uint16_t* xt = tokens.data();
  const int64_t blocks = N / 16, stride = K * 2;
  at::parallel_for(0, (blocks + 1) / 2, 8, [&](int64_t begin, int64_t end) {
    configure();
    alignas(64) float sums[2][256];
    for (int64_t pair = begin; pair < end; ++pair) {
      const int64_t n0 = pair * 32;
      const bool two = n0 + 16 < N;
      const uint16_t* w0 = w + n0 * K;
      const uint16_t* w1 = two ? w0 + 16 * K : w0;  // an odd last block computes its rows twice, keeps them once
      two_blocks(w0, stride, w1, stride, xt, K, sums);
      put(sums[0], b, y, M, N, n0);
      if (two) put(sums[1], b, y, M, N, n0 + 16);
    }
    _tile_release();
  });
}

// Attention's scores by the same tiles (decode_attention.cpp): the keys are the weight, read as cached ([S, D] rows at
// ``k2`` apart), the query rows the tokens (``qt``: ``q`` [R, D] interleaved, zeroed past R). For each live block of
// sixteen columns, scores[r][s] = scale * (q_r . k_s), one fp32 sum over D in the same order whatever R, so a query
// row's scores are the same alone or among others. A last block short of sixteen columns is copied to ``tail`` first
// (rows past S are zeros, never read from the cache). The AVX-512 dot products this replaces were about half of the
// kernel's arithmetic: each key row read once for every query row, with a horizontal sum every sixteen columns.
inline void scores(const uint16_t* q, int64_t R, int64_t D, const uint16_t* k, int64_t k2, int64_t S,
                   const std::vector<int64_t>& live, float scale, float* out, int64_t Sp, uint16_t* qt,
                   uint16_t* tail) {
  interleave(q, R, D, qt);
  alignas(64) float sums[2][256];
  const auto block = [&](int64_t s0, int64_t& stride) -> const uint16_t* {  // its 16 key rows, or the short tail's
    stride = k2 * 2;
    if (S - s0 >= 16) return k + s0 * k2;
    std::fill(tail, tail + 16 * D, uint16_t{0});
    for (int64_t i = 0; s0 + i < S; ++i) std::copy(k + (s0 + i) * k2, k + (s0 + i) * k2 + D, tail + i * D);
    stride = D * 2;
    return tail;
  };
  const auto put_block = [&](const float* from, int64_t s0) {
    for (int64_t r = 0; r < R; ++r)
      for (int64_t i = 0; i < 16; ++i) out[r * Sp + s0 + i] = from[i * 16 + r] * scale;
  };
  // two blocks a pass (one alone had waited on its chain's latency: SmolLM2's d of 64 is two products a block)
  for (size_t i = 0; i < live.size(); i += 2) {
    const bool two = i + 1 < live.size();
    int64_t stride0 = 0, stride1 = 0;
    const uint16_t* b0 = block(live[i], stride0);
    const uint16_t* b1 = two ? block(live[i + 1], stride1) : b0;  // the tail is only ever the last block
    if (!two) stride1 = stride0;
    two_blocks(b0, stride0, b1, stride1, qt, D, sums);
    put_block(sums[0], live[i]);
    if (two) put_block(sums[1], live[i + 1]);
  }
}

}  // namespace amx
#endif
