"""The tuning tables: every constant that decides which strategy runs, or how fast,
each with why and where it was measured. ``print(portops.tuning())`` shows them.
"""

from __future__ import annotations

from ._tuning import Param, Table, register

__all__ = ["CUDA", "EINSUM", "NUMPY", "TORCH"]

XEON = "2-core Intel Xeon (Sapphire Rapids VM), 2 MiB L2"
EPYC = "2-core AMD EPYC VM, 1 MiB L2"
H100 = "NVIDIA H100 80GB"

# One entry per parameter: Param(name, value, unit, where it was measured, why).
# fmt: off
NUMPY = register(Table("numpy", [
    Param("vecdot_few", 32, "vectors", EPYC,
          "up to this many vectors np.vecdot's per-vector cost is below einsum's setup"),
    Param("vecdot_short", 32, "elements", EPYC,
          "from this length np.vecdot's per-vector loop restart is repaid; shorter contiguous "
          "vectors go to einsum's loop (2-3x faster at length 8)",
          measure="portops._backends.numpy.measure:vecdot_short"),
    Param("column_bytes", 16, "bytes", EPYC,
          "rows this short are summed one column at a time (einsum in Fortran order), 3-5x "
          "faster than a loop call per row (10^6x2: 1.6 vs 8.6 ms)"),
    Param("thread_grain", 4 << 20, "bytes", XEON,
          "bytes a thread must move to repay its start and the GIL hand-overs of its NumPy "
          "calls: threads = bytes moved / this, up to the threads allowed",
          measure="portops._backends.numpy.measure:thread_grain"),
    Param("thread_call_bytes", 256 << 10, "bytes", XEON,
          "a NumPy call on a helper thread moves at least this much, or waiting for the GIL "
          "around it costs more than the thread gains (B1 C64 256x256 forward: 128 KiB "
          "calls ran 2.2x slower on two threads than on one; 512 KiB ones 1.8x faster)"),
    Param("block_fraction", 0.5, "of a cache", EPYC,
          "blocks fill half the cache they are worked in: the other half holds what they read "
          "(adjoint and shear blocks in L2, transposes in L1)"),
    Param("forward_block_l2", 2, "L2s", EPYC,
          "forward blocks are larger: each pays a copy-out per distinct offset (4 MiB blocks on"
          " a 2 MiB-L2 machine)"),
    Param("small_adjoint_l2", 4, "L2s", EPYC,
          "a result up to this many L2s is written by one copy per channel, which costs less "
          "than setting up blocks"),
    Param("loop_rows", 128, "rows", EPYC,
          "with this many rows per channel the blocked forward's few calls per channel beat a "
          "per-row restart of NumPy's loop (interpreter costs both)"),
    Param("sheared_growth", 1, "widths", EPYC,
          "the sheared sum pads rows by the offsets' span: past this many widths of padding it "
          "adds more than the slice-add loop (twice for channels last)"),
    Param("einsum_loop_flops", 1000, "products", EPYC,
          "a NumPy call costs what about this many products of einsum's C loop do: below it, "
          "tiny operands take the loop rather than the lowering's calls",
          measure="portops._backends.numpy.measure:einsum_loop_flops"),
]))
TORCH = register(Table("torch", [
    Param("views_min", 8192, "elements", EPYC,
          "below this, a trip to NumPy's loops through views costs more than it saves over "
          "torch's own call (views and wrapping: about 1.5 us)"),
    Param("row_dots_bytes", 512, "bytes", XEON,
          "a BLAS call per vector costs what streaming a few hundred bytes does: from this "
          "length, on two threads, it is repaid (512-byte vectors against NumPy's one-thread "
          "loop: 0.4-0.8x from 2 MB of input, 1.1-1.4x below 1 MB; 1 KiB: 0.5-0.8x)"),
    Param("numpy_forward_l2", 0.5, "of an L2", EPYC,
          "a shift_sum forward whose x fits this much of a core's L2 runs NumPy's kernels on "
          "views: each of torch's per-channel adds pays its dispatch"),
    Param("native_traffic", 3, "x NumPy's bytes", "derived from the bytes each moves",
          "torch's product and sum also write and reread the product: with more threads than "
          "this, they finish before NumPy's one-thread fused loop (inputs past the L2s)"),
    Param("einsum_loop_calls", 3, "torch calls", EPYC,
          "NumPy's loop on views costs about as much Python as this many torch calls per "
          "operand past the first: tiny einsums compare call counts"),
]))
EINSUM = register(Table("einsum", [
    Param("memory_cost", 16, "GEMM flops", EPYC,
          "moving one element (writing a result, an elementwise multiply-and-sum) costs this "
          "many multiply-adds of a BLAS GEMM, in the order search"),
    Param("copy_factor", 4, "element moves", EPYC,
          "a copy made to lay an operand out for GEMM (a transpose that cannot be a view) costs"
          " this many element moves: it reads and writes out of order"),
    Param("dot_mn", 2, "elements", EPYC,
          "batched dot products with M*N up to this are a multiply-and-sum: BLAS would make one"
          " tiny GEMV call per batch entry"),
    Param("dot_batch", 16, "batch entries", EPYC,
          "... from this many batch entries on (fewer GEMV calls cost less than the broadcast "
          "product)"),
    Param("search_cost", float(1 << 20), "GEMM flops", EPYC,
          "a contraction estimated above this (about a millisecond) repays a wider search: more"
          " candidate orders, each lowered and ranked"),
    Param("small_batched", 1 << 16, "elements", EPYC,
          "GEMMs with several batch axes and operands this small go to the library's own "
          "matmul: its batch folding in C costs less, and layout cannot matter"),
]))
CUDA = register(Table("cuda", [
    Param("threads_per_block", 256, "threads", H100,
          "CuPy's grid-stride kernels and per-row vecdot: enough threads per block to hide "
          "latency, few enough for many resident blocks"),
    Param("blocks_per_sm", 16, "blocks", H100,
          "resident blocks per SM for CuPy's grid-stride loops: enough memory requests in "
          "flight to reach the copy bandwidth"),
    Param("general_block", 512, "elements", H100,
          "elements per program of the Triton general shift_sum kernels"),
    Param("row_warps", 4, "warps", H100,
          "warps per program of the row kernels (8 for the widest block); the narrowest block "
          "is one column per lane of these warps"),
    Param("row_block_max", 1024, "columns", H100,
          "one program covers a whole row of up to this many columns: fewer, longer programs "
          "keep more loads in flight (B=16, C=28, 256x256 float32)"),
    Param("unroll_channels", 128, "channels", H100,
          "channel loops are unrolled up to this many channels (kernel instances per count); "
          "the row kernels cover no more"),
    Param("vecdot_tile", 4096, "elements", H100,
          "elements per program and pass of the Triton vecdot row reduction"),
    Param("programs_per_sm", 4, "programs", H100,
          "below this many vecdot programs per SM the contracted axis is split, so that enough "
          "programs fill the GPU"),
]))
# fmt: on
