"""Slow, plain-Python reference implementations ("oracles") of the meshsim kernels.

Each oracle is written from its machine's documentation alone, literally and slowly, so that it is
obviously correct; the tests compare it with the fast kernel cycle by cycle (or superstep by
superstep), so that a bug in either shows. An oracle takes nothing from meshsim and nothing from the
kernels (only the standard library, and numpy for the rdu's output arrays): what it needs of the
model, the operator table or the layout of the kernel's tables, it has from the docs, and tests
check where the doc, the oracle and the code must agree.

- `mesh_ref`: the `mesh` machine of docs/mesh.md (task migration, routed traffic, the
  layer-pipelined transformer with weight streaming), stepped one cycle at a time by
  `MeshReference`; `simulate(cycles, **params)` runs a whole scenario.
- `rdu_ref`: the `rdu` machine of docs/rdu.md ("One cycle"), every cycle of every chip of a
  compiled program's tables; `simulate(prog)` runs a whole program. Its table and observable column
  numbers are its own copy of docs/rdu.md's, tested equal to the kernel's.
- `ipu_ref`: the `ipu` machine of docs/ipu.md, from the scenario's values to every superstep,
  pipeline step, tile's busy cycles and memory; `simulate(values)` runs a whole scenario. Its
  transformer operators (FLOPs and bytes) are the table of docs/ipu.md, not meshsim.transformer.

In every module `simulate(...)` runs a whole program or scenario through the oracle and returns its
observables; a class that steps a machine cycle by cycle, where there is one, is `<Machine>Reference`.
"""
