"""The wafer's decode kernel: one token of a dense decoder on a P x P region, timed wavelet by wavelet
(docs/decode.md). Its reference is kernels/reference/decode_ref.py, written from the same page.

Every collective is computed as the page's recurrences over each element's leaving and arrival
cycles, line by line (the lines of a step are independent, run in parallel with `prange`, each
writing only its own PEs, so the result does not depend on the thread count).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

#: The collectives of a layer, in order (docs/decode.md, "One layer"): (line, what the local work
#: and the message are made of). Line: 0 a column collective (positions are rows), 1 a row one.
COLUMN, ROW = 0, 1
STEPS = ("norm1", "qkv", "scores", "softmax_max", "softmax_sum", "values", "out_proj", "norm2", "up", "down")
STEP_LINES = np.array([COLUMN, COLUMN, ROW, COLUMN, COLUMN, COLUMN, ROW, COLUMN, COLUMN, ROW], dtype=np.int64)


@njit(cache=True)
def _chain(q, at, m, hop, add, phase, count, t_up, t_out, free, member):
    """One side of a group's phase: the chain over entries 0 ... count - 1 toward the root, entry j ready at
    q[j] and standing at position at[j] (the level's members, through
    the routers between, or every PE between them where the level is relayed). t_out ends as the last
    entry's leaving cycles (t_up is scratch); where entry j is a member of the level (member[j]; not a
    relay), free[at[j]] becomes its phase done. Returns whether the chain had any entry."""
    had = False
    for j in range(count):
        for e in range(m):
            t = q[j] + phase + e
            if had:
                a = t_up[e] + hop * abs(at[j] - at[j - 1]) + add
                if a > t:
                    t = a
            if e > 0 and t_out[e - 1] + 1 > t:
                t = t_out[e - 1] + 1
            t_out[e] = t
        for e in range(m):
            t_up[e] = t_out[e]
        if member[j]:
            free[at[j]] = t_out[m - 1] + 1
        had = True
    return had


@njit(cache=True)
def _root(q, m, phase, left, has_left, hops_left, right, has_right, hops_right, hop, add):
    """The cycle a root (of a group, or of the line) is done: it adds what comes from each side it
    receives from (their leaving cycles `left`, `right`, each so many hops away) to its own."""
    u_prev = 0
    for e in range(m):
        u = q + phase + e
        if has_left:
            a = left[e] + hop * hops_left + add
            if a > u:
                u = a
        if has_right:
            a = right[e] + hop * hops_right + add
            if a > u:
                u = a
        if e > 0 and u_prev + 1 > u:
            u = u_prev + 1
        u_prev = u
    return u_prev + 1


@njit(cache=True)
def _side(members, first, last, relayed, free, at, q, member):
    """The entries of one side of a group, from member `first` toward the root member `last` (excluded):
    the members themselves, or, where the level is relayed, every position between (docs/decode.md,
    "Routes and relays"). Fills at[] with their positions, q[] with the cycles they are ready (each
    PE's last phase of the collective done; a relay does not change it) and member[] with whether
    each is the level's member; returns how many."""
    s = 1 if last > first else -1
    count = 0
    j = first
    while j != last:
        pos = members[j]
        stop = members[j + s] if relayed else pos + s
        while pos != stop:
            at[count] = pos
            q[count] = free[pos]
            member[count] = pos == members[j]
            count += 1
            pos += s
        j += s
    return count


@njit(cache=True)
def line_collective(ready, m, group, levels, routed, hop, add, phase, out):
    """One line's collective (docs/decode.md, "A collective on a line"): out[i] = the cycle it completes
    on position i, from ready[i]; a K-tree of `levels` levels, its levels above `routed` relayed."""
    n = ready.shape[0]
    if m == 0:
        for i in range(n):
            out[i] = ready[i]
        return
    free = ready.copy()  # each PE's last phase done: the cycle it is ready for its next
    members = np.arange(n)
    t_up = np.empty(m, np.int64)
    left = np.empty(m, np.int64)
    right = np.empty(m, np.int64)
    at = np.empty(n, np.int64)
    q = np.empty(n, np.int64)
    member = np.empty(n, np.bool_)
    for level in range(1, levels + 1):
        count = members.shape[0]
        size = group if level < levels else count
        n_groups = (count + size - 1) // size
        roots = np.empty(n_groups, np.int64)
        relayed = level > routed
        for j in range(n_groups):
            lo = j * size
            s = min(size, count - lo)
            r = lo + s // 2
            root = members[r]
            k = _side(members, lo, r, relayed, free, at, q, member)
            has_l = _chain(q, at, m, hop, add, phase, k, t_up, left, free, member)
            hl = root - at[k - 1] if has_l else 0
            k = _side(members, lo + s - 1, r, relayed, free, at, q, member)
            has_r = _chain(q, at, m, hop, add, phase, k, t_up, right, free, member)
            hr = at[k - 1] - root if has_r else 0
            free[root] = _root(free[root], m, phase, left, has_l, hl, right, has_r, hr, hop, add)
            roots[j] = root
        members = roots
    root = members[0]
    last = free[root] + phase + m - 1  # b(m - 1)
    for i in range(n):
        out[i] = last + hop * abs(i - root) + 1


@njit(cache=True)
def _local(macs, rate_num, rate_den):
    """Cycles of `macs` multiply-adds at rate_num / rate_den a cycle, rounded up."""
    return (macs * rate_den + rate_num - 1) // rate_num


@njit(cache=True)
def _one_shape(step, dp, qp, fp, g, heads, n_y):
    """(local multiply-adds, message elements) of a step for one sequence on a PE of a row holding n_y
    tokens (docs/decode.md, "One layer")."""
    if step == 0 or step == 7:
        return dp, 1
    if step == 1:
        return dp * qp, qp
    if step == 2:
        return dp * n_y, heads * n_y
    if step == 3 or step == 4:
        return heads * n_y, heads
    if step == 5:
        return n_y * dp, dp
    if step == 6:
        return dp * dp, dp
    if step == 8:
        return dp * g * fp, g * fp
    return fp * dp, dp


@njit(cache=True)
def _step_shape(step, dp, qp, fp, g, heads, n_y, batch):
    """(local multiply-adds, message elements) of a step for `batch` sequences: each B times one's
    ("More than one sequence")."""
    macs, m = _one_shape(step, dp, qp, fp, g, heads, n_y)
    return batch * macs, batch * m


@njit(cache=True, parallel=True)
def layer(done, dp, qp, fp, g, heads, rows_tokens, group, levels, routed, hop, add, phase, rate_num, rate_den, batch):
    """One layer (docs/decode.md, "One layer") of `batch` sequences: `done[y, x]` holds the cycle the
    layer starts on each PE and ends holding the cycle it completes there."""
    p = done.shape[0]
    for step in range(10):
        if STEP_LINES[step] == COLUMN:
            # a column collective's message is the same on every row (1, qp, A, dp or g fp elements)
            for x in prange(p):
                ready = np.empty(p, np.int64)
                out = np.empty(p, np.int64)
                m = 0
                for y in range(p):
                    macs, m = _step_shape(step, dp, qp, fp, g, heads, rows_tokens[y], batch)
                    ready[y] = done[y, x] + _local(macs, rate_num, rate_den)
                line_collective(ready, m, group, levels, routed, hop, add, phase, out)
                for y in range(p):
                    done[y, x] = out[y]
        else:
            for y in prange(p):
                ready = np.empty(p, np.int64)
                out = np.empty(p, np.int64)
                macs, m = _step_shape(step, dp, qp, fp, g, heads, rows_tokens[y], batch)
                for x in range(p):
                    ready[x] = done[y, x] + _local(macs, rate_num, rate_den)
                line_collective(ready, m, group, levels, routed, hop, add, phase, out)
                for x in range(p):
                    done[y, x] = out[x]


@njit(cache=True)
def token(p, dp, qp, fp, g, heads, n_layers, rows_tokens, group, levels, routed, hop, add, phase, rate_num, rate_den,
          layer_done, batch):
    """One token of `batch` sequences (docs/decode.md, "A token"): its cycles; layer_done[k] = layer k's
    completion, the latest over the PEs. With a token in every row it takes `_token_by_lines`, else the
    whole grid."""
    if rows_tokens.min() >= 1:
        return _token_by_lines(p, dp, qp, fp, g, heads, n_layers, rows_tokens, group, levels, routed, hop, add, phase,
                               rate_num, rate_den, layer_done, batch)
    done = np.zeros((p, p), np.int64)
    for k in range(n_layers):
        layer(done, dp, qp, fp, g, heads, rows_tokens, group, levels, routed, hop, add, phase, rate_num, rate_den,
              batch)
        layer_done[k] = done.max()
    return layer_done[n_layers - 1] if n_layers else 0


@njit(cache=True)
def _token_by_lines(p, dp, qp, fp, g, heads, n_layers, rows_tokens, group, levels, routed, hop, add, phase, rate_num,
                    rate_den, layer_done, batch):
    """`token` computed one line a step. The collectives' recurrences are shift-equivariant (every
    ready cycle later by s makes every cycle later by s), and each PE's local work depends on its row
    alone, so the completion cycles stay the sum of a row part and a column part, done[y, x] = a[y] +
    b[x]: a column collective's lines are one line shifted by b[x], giving a new a; a row collective
    whose message has m >= 1 elements leaves every line's PEs at its last element's time plus
    h |x - root| + 1, the same b for every row, and a row-dependent shift computed once per distinct m
    (a row with m = 0 would break the form: the caller takes the whole grid then). The result equals
    `layer` step for step (tests/test_decode_kernel.py)."""
    a = np.zeros(p, np.int64)
    b = np.zeros(p, np.int64)
    ready = np.empty(p, np.int64)
    out = np.empty(p, np.int64)
    lens = np.empty(p, np.int64)
    for k in range(n_layers):
        for step in range(10):
            for y in range(p):
                macs, m = _step_shape(step, dp, qp, fp, g, heads, rows_tokens[y], batch)
                a[y] += _local(macs, rate_num, rate_den)
                lens[y] = m
            if STEP_LINES[step] == COLUMN:
                line_collective(a, lens[0], group, levels, routed, hop, add, phase, out)
                for y in range(p):
                    a[y] = out[y]
            else:
                # a line of ready cycles b, its message m: its PEs complete at L(m) + h |x - root| + 1,
                # L(m) its last element's leaving; row y's are a[y] later
                last_m = -1
                shift = 0
                for y in range(p):
                    if lens[y] != last_m:
                        line_collective(b, lens[y], group, levels, routed, hop, add, phase, out)
                        last_m = lens[y]
                        shift = out.min()
                    a[y] += shift
                for x in range(p):
                    ready[x] = out[x] - shift
                for x in range(p):
                    b[x] = ready[x]
        layer_done[k] = a.max() + b.max()
    return layer_done[n_layers - 1] if n_layers else 0
