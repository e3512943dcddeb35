// shift_sum family on CUDA: gather kernels (no atomics), mask fused.
//
// Every layout is reduced (portops/_kernels/geometry.py) to six iteration dimensions shared by
// the array with channels ("big": x, or the adjoint's result) and the one without
// ("small": y), in the order  O0, O1, O2, W, I0, I1  (three outer dims, the shifted axis,
// two inner dims), plus the channel dimension of the big array and of the mask. Strides
// are in elements and may be 0 (broadcast mask) or negative. ``I`` is int for problems
// that fit in 2^31 elements and long long otherwise.
//
// Channel c is shifted by o_c = table[c] when a table is given, else c * step + base.
//
// Loaded by CuPy with name_expressions (NVRTC), so no standard library headers.

#include <cuda_fp16.h>

namespace portops {

struct c64 {
  float re, im;
};
struct __align__(16) c128 {
  double re, im;
};

__device__ __forceinline__ c64 operator+(c64 a, c64 b) { return {a.re + b.re, a.im + b.im}; }
__device__ __forceinline__ c128 operator+(c128 a, c128 b) { return {a.re + b.re, a.im + b.im}; }
__device__ __forceinline__ c64 operator*(c64 a, c64 b) {
  return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}
__device__ __forceinline__ c128 operator*(c128 a, c128 b) {
  return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}

// Conversions between the element types: Cast<To>::from(v).
template <typename To>
struct Cast {
  template <typename From>
  static __device__ __forceinline__ To from(From v) { return static_cast<To>(v); }
  static __device__ __forceinline__ To from(__half v) { return static_cast<To>(__half2float(v)); }
};
template <>
struct Cast<__half> {
  template <typename From>
  static __device__ __forceinline__ __half from(From v) { return __float2half(static_cast<float>(v)); }
  static __device__ __forceinline__ __half from(__half v) { return v; }
};
template <>
struct Cast<c64> {
  template <typename From>
  static __device__ __forceinline__ c64 from(From v) { return {static_cast<float>(v), 0.0f}; }
  static __device__ __forceinline__ c64 from(__half v) { return {__half2float(v), 0.0f}; }
  static __device__ __forceinline__ c64 from(c64 v) { return v; }
  static __device__ __forceinline__ c64 from(c128 v) {
    return {static_cast<float>(v.re), static_cast<float>(v.im)};
  }
};
template <>
struct Cast<c128> {
  template <typename From>
  static __device__ __forceinline__ c128 from(From v) { return {static_cast<double>(v), 0.0}; }
  static __device__ __forceinline__ c128 from(__half v) {
    return {static_cast<double>(__half2float(v)), 0.0};
  }
  static __device__ __forceinline__ c128 from(c64 v) { return {v.re, v.im}; }
  static __device__ __forceinline__ c128 from(c128 v) { return v; }
};

template <typename T>
__device__ __forceinline__ T zero() { return Cast<T>::from(0); }

template <typename T>
__device__ __forceinline__ T conj(T v) { return v; }
template <>
__device__ __forceinline__ c64 conj(c64 v) { return {v.re, -v.im}; }
template <>
__device__ __forceinline__ c128 conj(c128 v) { return {v.re, -v.im}; }

// |v|^2 in the real type R.
template <typename R, typename T>
__device__ __forceinline__ R abs2(T v) { R r = Cast<R>::from(v); return r * r; }
template <typename R>
__device__ __forceinline__ R abs2(c64 v) { return static_cast<R>(v.re * v.re + v.im * v.im); }
template <typename R>
__device__ __forceinline__ R abs2(c128 v) { return static_cast<R>(v.re * v.re + v.im * v.im); }

// v / d for a positive real d.
template <typename T, typename R>
__device__ __forceinline__ T div_real(T v, R d) { return v / Cast<T>::from(d); }
template <typename R>
__device__ __forceinline__ c64 div_real(c64 v, R d) {
  float f = static_cast<float>(d);
  return {v.re / f, v.im / f};
}
template <typename R>
__device__ __forceinline__ c128 div_real(c128 v, R d) {
  double f = static_cast<double>(d);
  return {v.re / f, v.im / f};
}

// Read-only loads through the texture path where the type allows it.
template <typename T>
__device__ __forceinline__ T load(const T* p) { return __ldg(p); }
template <>
__device__ __forceinline__ c64 load(const c64* p) {
  float2 v = __ldg(reinterpret_cast<const float2*>(p));
  return {v.x, v.y};
}
template <>
__device__ __forceinline__ c128 load(const c128* p) {
  double2 v = __ldg(reinterpret_cast<const double2*>(p));
  return {v.x, v.y};
}

// Laid out exactly like the NumPy record built in portops/_backends/cupy/shift_sum.py:
// every field has type I, so there is no padding.
template <typename I>
struct Geometry {
  I size[6];   // O0, O1, O2, W (of the big array), I0, I1
  I big[6];    // strides of the big array (the one with channels)
  I mask[6];   // strides of the mask (0 where it broadcasts); unused without a mask
  I small[6];  // strides of the small array (y)
  I big_c;     // channel strides
  I mask_c;
  I channels;
  I out_width;  // size of the small array along W
  I step;       // o_c = c * step + base when no table is given
  I base;
  I total;        // elements the kernel writes
  I channel_fast;  // adjoint: 1 when channels vary fastest in the result
};

template <typename I>
__device__ __forceinline__ I offset_of(const long long* table, const Geometry<I>& g, I c) {
  return table != nullptr ? static_cast<I>(table[c]) : c * g.step + g.base;
}

// Linear index -> coordinates over (O0, O1, O2, W', I0, I1) with `width` for W.
template <typename I>
__device__ __forceinline__ void unravel(I idx, const Geometry<I>& g, I width, I (&k)[6]) {
  k[5] = idx % g.size[5];
  idx /= g.size[5];
  k[4] = idx % g.size[4];
  idx /= g.size[4];
  k[3] = idx % width;
  idx /= width;
  k[2] = idx % g.size[2];
  idx /= g.size[2];
  k[1] = idx % g.size[1];
  k[0] = idx / g.size[1];
}

template <typename I>
__device__ __forceinline__ I dot_skip_w(const I (&k)[6], const I (&s)[6]) {
  return k[0] * s[0] + k[1] * s[1] + k[2] * s[2] + k[4] * s[4] + k[5] * s[5];
}

// y[o, w', i] = sum_c (mask * x)[c, o, w' - o_c, i]: one thread per element of y,
// contiguous output, accumulation in A, one launch.
template <typename TX, typename TM, typename A, typename TO, typename I>
__global__ void shift_sum_forward(const TX* __restrict__ x, const TM* __restrict__ mask,
                                  TO* __restrict__ y, const long long* __restrict__ table,
                                  Geometry<I> g) {
  const I stride = static_cast<I>(blockDim.x) * gridDim.x;
  for (I idx = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; idx < g.total;
       idx += stride) {
    I k[6];
    unravel(idx, g, g.out_width, k);
    const I w = k[3];
    const TX* xb = x + dot_skip_w(k, g.big);
    const TM* mb = mask == nullptr ? nullptr : mask + dot_skip_w(k, g.mask);
    A acc = zero<A>();
    for (I c = 0; c < g.channels; ++c) {
      const I src = w - offset_of(table, g, c);
      if (src < 0 || src >= g.size[3]) continue;
      A v = Cast<A>::from(load(xb + c * g.big_c + src * g.big[3]));
      if (mb != nullptr) v = v * Cast<A>::from(load(mb + c * g.mask_c + src * g.mask[3]));
      acc = acc + v;
    }
    y[idx] = Cast<TO>::from(acc);
  }
}

// x[c, o, w, i] = conj(mask)[c, o, w, i] * y[o, w + o_c, i] (scaled by 1 / the number of
// channels reaching w + o_c when `by_count`, the pseudo-inverse without a mask).
// One thread per element of the result, written through its strides (g.big); threads
// walk channels outermost, or innermost when the result is channels-last, so that
// neighbouring threads write neighbouring addresses.
template <typename TY, typename TM, typename A, typename TO, typename I>
__global__ void shift_sum_adjoint(const TY* __restrict__ y, const TM* __restrict__ mask,
                                  TO* __restrict__ x, const long long* __restrict__ table,
                                  Geometry<I> g, int by_count) {
  const I stride = static_cast<I>(blockDim.x) * gridDim.x;
  const I per_channel = g.total / g.channels;
  for (I idx = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; idx < g.total;
       idx += stride) {
    I c, rest;
    if (g.channel_fast) {
      c = idx % g.channels;
      rest = idx / g.channels;
    } else {
      c = idx / per_channel;
      rest = idx % per_channel;
    }
    I k[6];
    unravel(rest, g, g.size[3], k);
    const I pos = k[3] + offset_of(table, g, c);
    A v = Cast<A>::from(load(y + dot_skip_w(k, g.small) + pos * g.small[3]));
    if (mask != nullptr) {
      v = v * Cast<A>::from(conj(load(mask + dot_skip_w(k, g.mask) + c * g.mask_c +
                                      k[3] * g.mask[3])));
    }
    if (by_count) {
      I n = 0;
      for (I d = 0; d < g.channels; ++d) {
        const I src = pos - offset_of(table, g, d);
        n += (src >= 0 && src < g.size[3]) ? 1 : 0;
      }
      v = div_real(v, static_cast<float>(n));  // n >= 1: channel c itself reaches pos
    }
    x[dot_skip_w(k, g.big) + c * g.big_c + k[3] * g.big[3]] = Cast<TO>::from(v);
  }
}

// First pass of the pseudo-inverse: z[o, w', i] = y / Phi where Phi > 0, else 0, with
// Phi = sum_c |mask[c, o, w' - o_c, i]|^2 gathered exactly as in the forward (R: real
// accumulation type). The second pass is shift_sum_adjoint on z.
template <typename TY, typename TM, typename R, typename TZ, typename I>
__global__ void shift_sum_pinv_divide(const TY* __restrict__ y, const TM* __restrict__ mask,
                                      TZ* __restrict__ z, const long long* __restrict__ table,
                                      Geometry<I> g) {
  const I stride = static_cast<I>(blockDim.x) * gridDim.x;
  for (I idx = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; idx < g.total;
       idx += stride) {
    I k[6];
    unravel(idx, g, g.out_width, k);
    const I w = k[3];
    const TM* mb = mask + dot_skip_w(k, g.mask);
    R phi = Cast<R>::from(0);
    for (I c = 0; c < g.channels; ++c) {
      const I src = w - offset_of(table, g, c);
      if (src < 0 || src >= g.size[3]) continue;
      phi = phi + abs2<R>(load(mb + c * g.mask_c + src * g.mask[3]));
    }
    const TZ v = Cast<TZ>::from(load(y + dot_skip_w(k, g.small) + w * g.small[3]));
    z[idx] = phi > Cast<R>::from(0) ? div_real(v, phi) : zero<TZ>();
  }
}

// ---------------------------------------------------------------------------- row kernels
// For the common layouts (the channel axis before the shifted one; the shifted axis and
// the axes after it contiguous) columns j index the shifted axis merged with the inner
// axes (W * I in the big array, W' * I in the small one) and channel c is shifted by
// o_c * I columns; rows index the outer dims O0, O1, O2. One block per (row, block of
// columns): the index arithmetic is done once per thread, and every channel's loads and
// stores are contiguous runs. Laid out like the NumPy record of the CuPy backend.
template <typename I>
struct Rows {
  I s1, s2;       // sizes of O1 and O2 (O0 follows from the grid)
  I big[3];       // outer strides of the big array (x, or the adjoint's result)
  I mask[3];      // ... of the mask (0 where it broadcasts)
  I small[3];     // ... of the small array (y)
  I scale[3];     // ... of the pseudo-inverse's 1 / Phi (0 where it broadcasts)
  I big_c, mask_c, mask_j;  // channel strides, and the mask's column stride
  I width, out_width;       // columns of the big and of the small array
  I step, base;             // o_c * I = c * step + base when no table is given
  I channels;
};

template <typename I>
__device__ __forceinline__ I row_offset(const Rows<I>& r, const I (&k)[3], const I (&s)[3]) {
  return k[0] * s[0] + k[1] * s[1] + k[2] * s[2];
}

template <typename I>
__device__ __forceinline__ void row_coords(const Rows<I>& r, I row, I (&k)[3]) {
  k[2] = row % r.s2;
  row /= r.s2;
  k[1] = row % r.s1;
  k[0] = row / r.s1;
}

template <typename I>
__device__ __forceinline__ I row_shift(const long long* table, const Rows<I>& r, I c) {
  return table != nullptr ? static_cast<I>(table[c]) : c * r.step + r.base;
}

// y[row, j] = sum_c (mask * x)[row, c, j - o_c]. CHANNELS > 0: the channel count, known
// at compile time so that the loop unrolls fully; 0: read from r.
template <typename TX, typename TM, typename A, typename I>
__device__ __forceinline__ A forward_term(const TX* xb, const TM* mb, const long long* table,
                                          const Rows<I>& r, I j, I c) {
  // Every channel's load is issued (from a clamped, valid address) and masked after, so
  // the loads of an unrolled group are in flight together.
  const I src = j - row_shift(table, r, c);
  const bool ok = src >= 0 && src < r.width;
  const I at = ok ? src : 0;
  A v = Cast<A>::from(load(xb + c * r.big_c + at));
  if (mb != nullptr) v = v * Cast<A>::from(load(mb + c * r.mask_c + at * r.mask_j));
  return ok ? v : zero<A>();
}

template <typename TX, typename TM, typename A, typename TO, typename I, int CHANNELS>
__global__ void shift_sum_forward_rows(const TX* __restrict__ x, const TM* __restrict__ mask,
                                       TO* __restrict__ y, const long long* __restrict__ table,
                                       Rows<I> r) {
  const I j = static_cast<I>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= r.out_width) return;
  I k[3];
  row_coords(r, static_cast<I>(blockIdx.x), k);
  const TX* xb = x + row_offset(r, k, r.big);
  const TM* mb = mask == nullptr ? nullptr : mask + row_offset(r, k, r.mask);
  A acc = zero<A>();
  if constexpr (CHANNELS > 0) {
#pragma unroll
    for (int c = 0; c < CHANNELS; ++c) acc = acc + forward_term<TX, TM, A, I>(xb, mb, table, r, j, c);
  } else {
#pragma unroll 8
    for (I c = 0; c < r.channels; ++c) acc = acc + forward_term<TX, TM, A, I>(xb, mb, table, r, j, c);
  }
  y[row_offset(r, k, r.small) + j] = Cast<TO>::from(acc);
}

// x[row, c, j] = conj(mask)[row, c, j] * y[row, j + o_c] (times scale[row, j + o_c]).
template <typename TY, typename TM, typename R, typename A, typename TO, typename I>
__device__ __forceinline__ void adjoint_term(const TY* yb, const R* qb, const TM* mb, TO* xb,
                                             const long long* table, const Rows<I>& r, I j,
                                             I c) {
  const I pos = j + row_shift(table, r, c);
  A v = Cast<A>::from(load(yb + pos));
  if (qb != nullptr) v = v * Cast<A>::from(load(qb + pos));
  if (mb != nullptr) v = v * Cast<A>::from(conj(load(mb + c * r.mask_c)));
  xb[c * r.big_c] = Cast<TO>::from(v);
}

template <typename TY, typename TM, typename R, typename A, typename TO, typename I, int CHANNELS>
__global__ void shift_sum_adjoint_rows(const TY* __restrict__ y, const TM* __restrict__ mask,
                                       const R* __restrict__ scale, TO* __restrict__ x,
                                       const long long* __restrict__ table, Rows<I> r) {
  const I j = static_cast<I>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= r.width) return;
  I k[3];
  row_coords(r, static_cast<I>(blockIdx.x), k);
  const TY* yb = y + row_offset(r, k, r.small);
  const R* qb = scale == nullptr ? nullptr : scale + row_offset(r, k, r.scale);
  const TM* mb = mask == nullptr ? nullptr : mask + row_offset(r, k, r.mask) + j * r.mask_j;
  TO* xb = x + row_offset(r, k, r.big) + j;
  if constexpr (CHANNELS > 0) {
#pragma unroll
    for (int c = 0; c < CHANNELS; ++c) {
      adjoint_term<TY, TM, R, A, TO, I>(yb, qb, mb, xb, table, r, j, c);
    }
  } else {
#pragma unroll 8
    for (I c = 0; c < r.channels; ++c) adjoint_term<TY, TM, R, A, TO, I>(yb, qb, mb, xb, table, r, j, c);
  }
}

// q[row, j] = 1 / Phi (0 where Phi == 0), Phi = sum_c |mask[row, c, j - o_c]|^2, or the
// number of channels reaching column j without a mask. Rows over the mask's extent.
template <typename TM, typename R, typename I>
__global__ void shift_sum_inverse_phi_rows(const TM* __restrict__ mask, R* __restrict__ q,
                                           const long long* __restrict__ table, Rows<I> r) {
  const I j = static_cast<I>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= r.out_width) return;
  I k[3];
  row_coords(r, static_cast<I>(blockIdx.x), k);
  const TM* mb = mask == nullptr ? nullptr : mask + row_offset(r, k, r.mask);
  R phi = Cast<R>::from(0);
  for (I c = 0; c < r.channels; ++c) {
    const I src = j - row_shift(table, r, c);
    if (src < 0 || src >= r.width) continue;
    phi = phi + (mb == nullptr ? Cast<R>::from(1) : abs2<R>(load(mb + c * r.mask_c + src * r.mask_j)));
  }
  q[row_offset(r, k, r.scale) + j] = phi > Cast<R>::from(0) ? Cast<R>::from(1) / phi : Cast<R>::from(0);
}

}  // namespace portops
