"""Software prefetches for the kernels: `prefetch(a, (i, j, ...))` asks the CPU to bring in the
cache line of a[i, j, ...] for reading, `prefetch_write` for writing, and they do nothing else: no
fault on any address, no effect on any value. The mesh kernel uses them for the few per-PE lines a
cycle will touch that a sweep over the whole grid has long evicted from the cache (a neighbour's
link slot that a message waits in, the PE's own link slots it will write).

Plain Python (NUMBA_DISABLE_JIT=1) gets functions that do nothing.
"""

from numba import config, types
from numba.core import cgutils
from numba.extending import intrinsic

if config.DISABLE_JIT:

    def prefetch(a, index):
        """Nothing to do without the JIT."""

    def prefetch_write(a, index):
        """Nothing to do without the JIT."""

else:
    from llvmlite import ir

    def _prefetch(write):
        """An intrinsic calling llvm.prefetch(&a[index], write, keep in all cache levels, data)."""

        def typer(typingctx, a, index):
            if not isinstance(a, types.Array) or not isinstance(index, types.UniTuple) or index.count != a.ndim:
                return None
            sig = types.void(a, index)

            def codegen(context, builder, signature, args):
                aryty, idxty = signature.args
                ary = context.make_array(aryty)(context, builder, args[0])
                idx = cgutils.unpack_tuple(builder, args[1], idxty.count)
                ptr = cgutils.get_item_pointer(context, builder, aryty, ary, idx, wraparound=False)
                i8p = ir.IntType(8).as_pointer()
                i32 = ir.IntType(32)
                fn = builder.module.declare_intrinsic("llvm.prefetch", [i8p],
                                                      ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]))
                builder.call(fn, [builder.bitcast(ptr, i8p), i32(int(write)), i32(3), i32(1)])
                return context.get_dummy_value()

            return sig, codegen

        return intrinsic(typer)

    prefetch = _prefetch(False)
    prefetch_write = _prefetch(True)
