// The AVX-512 BF16 GEMM of a step of a few tokens (included by decode_attention.cpp, inside an anonymous namespace):
// blocks of NB weight rows, each read once for every row of x, one lane-wise sum over K each.
#pragma once

template <int M, int NB>
void linear_block(const uint16_t* x, const uint16_t* w, const uint16_t* b, uint16_t* y, int64_t K, int64_t N,
                  int64_t n0) {
  __m512 acc[M][NB];
  for (int m = 0; m < M; ++m)
    for (int j = 0; j < NB; ++j) acc[m][j] = _mm512_setzero_ps();
  // the block after next and at least 16 KB ahead, NB lines a step: the weight is one stream, and the hardware's
  // prefetch alone left the cores waiting on memory (19 GB/s at one row)
  const char* ahead = reinterpret_cast<const char*>(w + n0 * K) + std::max<int64_t>(4 * NB * K, 16 << 10);
  const char* end = reinterpret_cast<const char*>(w + N * K);
  for (int64_t k = 0; k < K; k += 32) {
    for (int j = 0; j < NB; ++j) {
      const char* line = ahead + (k / 32 * NB + j) * 64;
      if (line < end) _mm_prefetch(line, _MM_HINT_T0);
    }
    __m512bh wv[NB];
    for (int j = 0; j < NB; ++j) wv[j] = (__m512bh)_mm512_loadu_si512(w + (n0 + j) * K + k);
    for (int m = 0; m < M; ++m) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + m * K + k);
      for (int j = 0; j < NB; ++j) acc[m][j] = _mm512_dpbf16_ps(acc[m][j], xv, wv[j]);
    }
  }
  for (int m = 0; m < M; ++m)
    for (int j = 0; j < NB; ++j) {
      float sum = _mm512_reduce_add_ps(acc[m][j]);
      if (b != nullptr) sum += widen(b[n0 + j]);
      y[m * N + n0 + j] = narrow(sum);
    }
}

template <int M, int NB>
void linear_group(const uint16_t* x, const uint16_t* w, const uint16_t* b, uint16_t* y, int64_t K, int64_t N,
                  int64_t n0) {
  if (n0 + NB <= N) {
    linear_block<M, NB>(x, w, b, y, K, N, n0);
  } else {
    for (int64_t n = n0; n < N; ++n) linear_block<M, 1>(x, w, b, y, K, N, n);
  }
}

// the next `rows` rows of x, at most 8: one instantiation per count
template <int NB>
void linear_some(const uint16_t* x, const uint16_t* w, const uint16_t* b, uint16_t* y, int64_t K, int64_t N,
                 int64_t n0, int64_t rows) {
  switch (rows) {
    case 1: linear_group<1, NB>(x, w, b, y, K, N, n0); break;
    case 2: linear_group<2, NB>(x, w, b, y, K, N, n0); break;
    case 3: linear_group<3, NB>(x, w, b, y, K, N, n0); break;
    case 4: linear_group<4, NB>(x, w, b, y, K, N, n0); break;
    case 5: linear_group<5, NB>(x, w, b, y, K, N, n0); break;
    case 6: linear_group<6, NB>(x, w, b, y, K, N, n0); break;
    case 7: linear_group<7, NB>(x, w, b, y, K, N, n0); break;
    default: linear_group<8, NB>(x, w, b, y, K, N, n0); break;
  }
}

// More than 8 rows: each weight block is read from memory once and then from L1 for every further 8 rows (a block is
// NB * K * 2 bytes: 2.3 KB at K = 576), so 16 rows stream the weight once and compute twice.
template <int NB>
void linear_rows(const uint16_t* x, const uint16_t* w, const uint16_t* b, uint16_t* y, int64_t M, int64_t K,
                 int64_t N) {
  at::parallel_for(0, (N + NB - 1) / NB, 16, [&](int64_t begin, int64_t end) {
    for (int64_t blk = begin; blk < end; ++blk) {
      for (int64_t m0 = 0; m0 < M; m0 += 8)
        linear_some<NB>(x + m0 * K, w, b, y + m0 * N, K, N, blk * NB, std::min<int64_t>(8, M - m0));
    }
  });
}
