/* The shift_sum forward's row loop on the CPU, loaded with ctypes where the optional
 * extension was built (row_loops in portops/_kernels/loader.py): for rows r in
 * [first, last),
 *     y[r, o_c + w] = sum over channels c of x[c, r, w] (* m[c, r, w] with a mask),
 * each output row summed while it stays in the L1 cache. Row r of x starts at
 * (r / per_block) * block_stride + (r % per_block) * row_stride; channel c adds
 * c * channel_stride. Row r of the mask (NULL: none) starts at mask_rows[r], and channel
 * c adds c * mask_channel (0 where one mask serves every channel). `restrict` rows let
 * the compiler vectorise the adds, which go channel by channel as the slice-add loop's
 * do (a product rounded before its add: built without FMA contraction), so results
 * match it bit for bit.
 */
#include <stddef.h>
#include <string.h>

#if defined(_MSC_VER)
#define restrict __restrict
#endif

#define SHIFT_ROWS(NAME, T)                                                               \
    static void NAME##_add(T *restrict dst, const T *restrict src, ptrdiff_t n)           \
    {                                                                                     \
        for (ptrdiff_t i = 0; i < n; i++)                                                 \
            dst[i] += src[i];                                                             \
    }                                                                                     \
    static void NAME##_add_product(T *restrict dst, const T *restrict src,                \
                                   const T *restrict mask, ptrdiff_t n)                   \
    {                                                                                     \
        for (ptrdiff_t i = 0; i < n; i++)                                                 \
            dst[i] += src[i] * mask[i];                                                   \
    }                                                                                     \
    void NAME(T *y, const T *x, ptrdiff_t first, ptrdiff_t last, ptrdiff_t per_block,    \
              ptrdiff_t block_stride, ptrdiff_t row_stride, ptrdiff_t channel_stride,      \
              ptrdiff_t channels, ptrdiff_t width, ptrdiff_t out_width,                   \
              const ptrdiff_t *offsets, const T *mask, const ptrdiff_t *mask_rows,         \
              ptrdiff_t mask_channel)                                                     \
    {                                                                                     \
        for (ptrdiff_t r = first; r < last; r++) {                                        \
            const T *xr = x + (r / per_block) * block_stride + (r % per_block) * row_stride; \
            T *yr = y + r * out_width;                                                    \
            memset(yr, 0, (size_t)out_width * sizeof(T));                                 \
            if (mask == NULL) {                                                           \
                for (ptrdiff_t c = 0; c < channels; c++)                                  \
                    NAME##_add(yr + offsets[c], xr + c * channel_stride, width);          \
                continue;                                                                 \
            }                                                                             \
            const T *mr = mask + mask_rows[r];                                            \
            for (ptrdiff_t c = 0; c < channels; c++)                                      \
                NAME##_add_product(yr + offsets[c], xr + c * channel_stride,              \
                                   mr + c * mask_channel, width);                         \
        }                                                                                 \
    }

SHIFT_ROWS(shift_rows_f32, float)
SHIFT_ROWS(shift_rows_f64, double)

/* setuptools builds this as an extension module, which must export PyInit_<name> (MSVC's
 * link asks for it). It is never imported: ctypes loads the library. */
void *PyInit__shift_rows(void) { return NULL; }
