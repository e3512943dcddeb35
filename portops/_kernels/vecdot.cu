// vecdot on CUDA: out[r] = sum_k a[r, k] * b[r, k] over 2-D views given by strides, each
// input read once, products summed in registers (A: float for half precision).
//
// vecdot_thread_rows: one thread per row, for short rows (a thread walks its row).
// vecdot_block_rows: one block per row (a block walks the row, warps reduce by shuffles),
// for long rows, read in coalesced runs when the contracted axis is unit-stride.
//
// Loaded by CuPy with name_expressions (NVRTC), so no standard library headers.

#include <cuda_fp16.h>

namespace portops {

template <typename A, typename T>
__device__ __forceinline__ A widen(T v) { return static_cast<A>(v); }
template <>
__device__ __forceinline__ float widen<float, __half>(__half v) { return __half2float(v); }

template <typename T, typename A>
__device__ __forceinline__ T narrow(A v) { return static_cast<T>(v); }
template <>
__device__ __forceinline__ __half narrow<__half, float>(float v) { return __float2half(v); }

template <typename T, typename A, typename I>
__global__ void vecdot_thread_rows(const T* __restrict__ a, const T* __restrict__ b,
                                   T* __restrict__ out, I rows, I length, I a_r, I a_k, I b_r,
                                   I b_k) {
  const I r = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const T* pa = a + r * a_r;
  const T* pb = b + r * b_r;
  A acc = A(0);
  for (I k = 0; k < length; ++k) acc += widen<A>(pa[k * a_k]) * widen<A>(pb[k * b_k]);
  out[r] = narrow<T>(acc);
}

template <typename T, typename A, typename I>
__global__ void vecdot_block_rows(const T* __restrict__ a, const T* __restrict__ b,
                                  T* __restrict__ out, I rows, I length, I a_r, I a_k, I b_r,
                                  I b_k) {
  __shared__ A partial[32];
  const I r = blockIdx.x;
  const T* pa = a + r * a_r;
  const T* pb = b + r * b_r;
  A acc = A(0);
#pragma unroll 4
  for (I k = threadIdx.x; k < length; k += blockDim.x) {
    acc += widen<A>(pa[k * a_k]) * widen<A>(pb[k * b_k]);
  }
  for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    const int warps = (blockDim.x + 31) >> 5;
    acc = lane < warps ? partial[lane] : A(0);
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
    if (lane == 0) out[r] = narrow<T>(acc);
  }
}

}  // namespace portops
