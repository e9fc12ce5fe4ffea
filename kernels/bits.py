"""Bit tricks the kernels need that Numba does not offer, one instruction each through LLVM's
intrinsics: `trailing_zeros(x)`, the index of the lowest set bit of a uint64 (64 for 0; tzcnt,
llvm.cttz), and `popcount(x)`, its number of set bits (popcnt, llvm.ctpop).

Plain Python (NUMBA_DISABLE_JIT=1) gets a plain function.
"""

import numpy as np
from numba import config, types
from numba.extending import intrinsic

if config.DISABLE_JIT:

    def trailing_zeros(x):
        """Index of the lowest set bit of x (64 if none)."""
        x = int(x)
        return np.int64(64 if x == 0 else (x & -x).bit_length() - 1)

    def popcount(x):
        """Number of set bits of x."""
        return np.int64(bin(int(x)).count("1"))

else:
    from llvmlite import ir

    @intrinsic
    def trailing_zeros(typingctx, x):
        """Index of the lowest set bit of the uint64 x (64 if none), as int64: llvm.cttz."""
        if not isinstance(x, types.Integer) or x.bitwidth != 64:
            return None
        sig = types.int64(x)

        def codegen(context, builder, signature, args):
            i64 = ir.IntType(64)
            i1 = ir.IntType(1)
            fn = builder.module.declare_intrinsic("llvm.cttz", [i64], ir.FunctionType(i64, [i64, i1]))
            return builder.call(fn, [args[0], i1(0)])

        return sig, codegen

    @intrinsic
    def popcount(typingctx, x):
        """Number of set bits of the uint64 x, as int64: llvm.ctpop."""
        if not isinstance(x, types.Integer) or x.bitwidth != 64:
            return None
        sig = types.int64(x)

        def codegen(context, builder, signature, args):
            i64 = ir.IntType(64)
            fn = builder.module.declare_intrinsic("llvm.ctpop", [i64], ir.FunctionType(i64, [i64]))
            return builder.call(fn, [args[0]])

        return sig, codegen
