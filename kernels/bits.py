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

    def _bit_intrinsic(name, flag):
        """A Numba intrinsic f(x) -> int64 for a uint64 x, calling llvm.<name> (with a false i1 second
        argument when `flag`: cttz's "zero is poison", which must be off)."""

        def typer(typingctx, x):
            if not isinstance(x, types.Integer) or x.bitwidth != 64:
                return None

            def codegen(context, builder, signature, args):
                i64, i1 = ir.IntType(64), ir.IntType(1)
                fnty = ir.FunctionType(i64, [i64, i1] if flag else [i64])
                fn = builder.module.declare_intrinsic(f"llvm.{name}", [i64], fnty)
                return builder.call(fn, [args[0], i1(0)] if flag else [args[0]])

            return types.int64(x), codegen

        return intrinsic(typer)

    #: Index of the lowest set bit of the uint64 x (64 if none), as int64: llvm.cttz.
    trailing_zeros = _bit_intrinsic("cttz", True)
    #: Number of set bits of the uint64 x, as int64: llvm.ctpop.
    popcount = _bit_intrinsic("ctpop", False)
