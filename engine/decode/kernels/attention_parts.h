// The decode attention kernel's parts (included by decode_attention.cpp, inside its anonymous namespace, after narrow
// and widen): horizontal sums, e^x, the values' sums, the live blocks of a row's columns.
#pragma once

// Sixteen vectors to one vector of their sixteen horizontal sums, in order.
inline __m512 sums16(const __m512* v) {
  __m512 t[8], u[4], w[2];
  for (int i = 0; i < 8; ++i) {
    const __m512 a = v[2 * i], b = v[2 * i + 1];
    t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  }
  for (int i = 0; i < 4; ++i) {
    const __m512 a = t[2 * i], b = t[2 * i + 1];
    u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD));
  }
  for (int i = 0; i < 2; ++i) {
    const __m512 a = u[2 * i], b = u[2 * i + 1];
    w[i] = _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x44), _mm512_shuffle_ps(a, b, 0xEE));
  }
  const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], 0x88), _mm512_shuffle_ps(w[0], w[1], 0xDD));
  // input j's sum lands in lane (j % 4) * 4 + j / 4: put it back in lane j
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, s);
}

// e^x for x <= 0, sixteen at a time (Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2, a degree-6 polynomial for e^r,
// then times 2^n), within 2 ulp; below -87 (a masked column's -1e30 included) exactly 0. The scalar std::exp it
// replaced was most of the kernel's time: three query rows of 700 columns each, per KV head and row of the batch.
inline __m512 exp16(__m512 x) {
  const __mmask16 gone = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_LT_OQ);
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~gone), _mm512_scalef_ps(y, n));
}

inline __m512 widen16(const uint16_t* p) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

// The values for query rows r0 .. r0 + G - 1 (those below R) of one (row of the batch, KV head): each value row read
// once and its products summed in registers, G rows of LANES vectors (the memory round trip of each sum per column
// was most of the loop's work). A group past R repeats row R - 1 and keeps nothing of it. Only the live blocks of
// sixteen columns are read: a block no query row attends to has every weight exactly 0, so leaving it out changes no
// bit of a sum.
template <int LANES, int G>
inline void values(const uint16_t* vb, int64_t v2, int64_t S, const std::vector<int64_t>& live, const float* scores,
                   int64_t Sp, float* acc, int64_t r0, int64_t R) {
  __m512 sums[G][LANES];
  const float* rows[G];
  for (int g = 0; g < G; ++g) {
    rows[g] = scores + (r0 + g < R ? r0 + g : R - 1) * Sp;
    for (int c = 0; c < LANES; ++c) sums[g][c] = _mm512_setzero_ps();
  }
  for (const int64_t s0 : live) {
    for (int64_t s = s0, e = std::min<int64_t>(s0 + 16, S); s < e; ++s) {
      __m512 row[LANES];
      for (int c = 0; c < LANES; ++c) row[c] = widen16(vb + s * v2 + 16 * c);
      for (int g = 0; g < G; ++g) {
        const __m512 p = _mm512_set1_ps(rows[g][s]);
        for (int c = 0; c < LANES; ++c) sums[g][c] = _mm512_fmadd_ps(p, row[c], sums[g][c]);
      }
    }
  }
  for (int g = 0; g < G && r0 + g < R; ++g)
    for (int c = 0; c < LANES; ++c) _mm512_storeu_ps(acc + (r0 + g) * LANES * 16 + 16 * c, sums[g][c]);
}

// Every query row's values, G rows a pass: a row's sums are the same bits in a group of any G (each its own order).
template <int LANES, int G>
inline void values_all(const uint16_t* vb, int64_t v2, int64_t S, const std::vector<int64_t>& live,
                       const float* scores, int64_t Sp, float* acc, int64_t R) {
  for (int64_t r0 = 0; r0 < R; r0 += G) values<LANES, G>(vb, v2, S, live, scores, Sp, acc, r0, R);
}

// The blocks of sixteen columns (by their first column) that some query row of one batch row attends to (mask m:
// that row's [rows, S]; null: every block). A row's columns sit anywhere in the batch's cache, and a row that joined
// short keeps a masked stretch up to the width the widest row had then (engine.decode.batch): reading only these,
// a step reads each row's own cache, not the widest row's.
inline void live_blocks(const uint8_t* m, int64_t rows, int64_t S, std::vector<int64_t>& live) {
  live.clear();
  for (int64_t s0 = 0; s0 < S; s0 += 16) {
    const int64_t n = S - s0 < 16 ? S - s0 : 16;
    const __mmask16 keep = static_cast<__mmask16>(n == 16 ? 0xFFFF : (1u << n) - 1);
    bool any = m == nullptr;
    for (int64_t r = 0; r < rows && !any; ++r) {
      const __m128i bytes = _mm_maskz_loadu_epi8(keep, m + r * S + s0);
      any = _mm_test_epi8_mask(bytes, bytes) != 0;
    }
    if (any) live.push_back(s0);
  }
}
