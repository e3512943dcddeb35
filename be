ab,bc {'parse': 4.7, 'choose': 78.9, 'build': 60.1, 'lookup': 143.6, 'select': 0.7, 'first': 185.4, 'cached': 5.6, 'npy': 27.2, 'clr': 0.2} 1 ['batched matmul'] numpy_einsum_loop
ab,ab {'parse': 4.5, 'choose': 83.7, 'build': 63.7, 'lookup': 158.6, 'select': 0.6, 'first': 225.3, 'cached': 5.8, 'npy': 21.0, 'clr': 0.2} 4 ['batched matmul'] numpy_einsum_loop
abcd,cdef {'parse': 5.3, 'choose': 106.2, 'build': 100.9, 'lookup': 222.7, 'select': 0.7, 'first': 263.8, 'cached': 7.1, 'npy': 35.0, 'clr': 0.2} 4 ['batched matmul'] numpy_einsum_loop
