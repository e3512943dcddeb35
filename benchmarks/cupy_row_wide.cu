// A variant of portops' CuPy forward row kernel for `benchmarks.gpu_timing`'s probe, not
// part of the package: compiled after portops/_kernels/shift_sum.cu (whose helpers it
// uses). Each thread sums COLS output columns of its row, blockDim.x apart (so that every
// load instruction of a warp stays one contiguous run), with every channel's loads
// unrolled: COLS * CHANNELS independent loads in flight per thread, as in the Triton row
// kernel's programs of several columns per lane.

namespace portops {

template <typename TX, typename TM, typename A, typename TO, typename I, int CHANNELS, int COLS>
__global__ void shift_sum_forward_rows_wide(const TX* __restrict__ x, const TM* __restrict__ mask,
                                            TO* __restrict__ y,
                                            const long long* __restrict__ table, Rows<I> r) {
  const I first = static_cast<I>(blockIdx.y) * blockDim.x * COLS + threadIdx.x;
  if (first >= r.out_width) return;
  I k[3];
  row_coords(r, static_cast<I>(blockIdx.x), k);
  const TX* xb = x + row_offset(r, k, r.big);
  const TM* mb = mask == nullptr ? nullptr : mask + row_offset(r, k, r.mask);
  A acc[COLS];
#pragma unroll
  for (int q = 0; q < COLS; ++q) acc[q] = zero<A>();
#pragma unroll
  for (int c = 0; c < CHANNELS; ++c) {
#pragma unroll
    for (int q = 0; q < COLS; ++q) {
      // A column past the row reads valid addresses of the row (forward_term clamps them)
      // and is not stored.
      const I j = first + static_cast<I>(q) * static_cast<I>(blockDim.x);
      acc[q] = acc[q] + forward_term<TX, TM, A, I>(xb, mb, table, r, j, static_cast<I>(c));
    }
  }
  TO* yb = y + row_offset(r, k, r.small);
#pragma unroll
  for (int q = 0; q < COLS; ++q) {
    const I j = first + static_cast<I>(q) * static_cast<I>(blockDim.x);
    if (j < r.out_width) yb[j] = Cast<TO>::from(acc[q]);
  }
}

}  // namespace portops
