"""The mesh's cycle as named steps (docs/mesh.md, "One cycle"): the driver over cycles and blocks,
`run_cycles`, and the row stepper, `_step_rows`, each spliced into the one function Numba compiles
in kernels/mesh.py by `python -m kernels.splice` (docs/design.md, "Spliced kernels").

Each step reads the state it needs by name: its parameters are the names of the caller's variables
it reads, and it returns the ones it changes. The names it reads beyond those (constants, the small
jitted helpers, `np`) are kernels/mesh.py's: this module is source for the splice, never imported
by the kernels. The migration policies' own parts are in kernels/mesh_policies.py.
"""


def run_cycles(st, cfg, seed, t0, n_cycles, ev_cycle_lo, ev_unit, ev_work, block_rows, series, depth_series,
               lat_hist_blocks, cum):
    """Run cycles t0 .. t0+n_cycles-1 of the mesh in place; return -1, or the first cycle whose
    conservation check failed.

    st: the state (MeshState, allocated by meshsim.mesh.state.allocate_mesh). cfg: int64 config vector,
    indices CFG_* (built by mesh_config).
    ev_cycle_lo: int64[n_cycles + 1] offsets into the trace events (ev_unit int64, ev_work uint16,
    sorted by cycle then unit) for cycles t0..; empty arrays for Bernoulli workloads.
    block_rows: int64[n_blocks + 1] row bounds of the fixed row blocks split over threads.
    series: int64[>= n_cycles, N_SERIES] and depth_series: int64[>= n_cycles, Q+1], filled per cycle.
    lat_hist_blocks: int64[n_blocks, n_bins], accumulated. cum: int64[6] running totals (tasks
    injected + packets offered, refused, completed, messages in flight, delivered, control messages in
    flight), carried across calls.
    """
    (n_blocks, acc, dh, scratch, cols, arrivals, flags, is_lp, lp_w, lp_reg, lp_rep, lp_adm, lp_fin,
     lp_done, lp_admit_t, lp_took, lp_ctl, is_stream, per_pass, load_cycles, fast_forward, n_rep, took,
     done_ev, stride) = _run_setup(st, cfg, block_rows, depth_series)
    i = np.int64(0)  # (typed int64 from the start: a literal 0 had _fast_forward compiled twice)
    while i < n_cycles:
        t = t0 + i
        key_inject = cycle_key(seed, STREAM_INJECT, t)
        key_migrate = cycle_key(seed, STREAM_MIGRATE, t)
        key_dest = cycle_key(seed, STREAM_DEST, t)
        acc[:, :] = 0
        dh[:, :, :] = 0
        waiting = 0
        if is_lp:
            waiting, all_took = _pipeline_admit(lp_w, lp_reg, lp_rep, lp_adm, lp_fin, lp_admit_t, lp_took, lp_ctl,
                                                is_stream, per_pass, load_cycles, n_rep, took, done_ev, t, waiting)
            # Fast-forward: with nothing on the move and every chunk taken, nothing happens but
            # countdown until the first task completes or a load ends; do those cycles at once.
            if fast_forward and all_took and cum[3] == 0 and lp_ctl[CTL_IN_ROUTER] == 0 and \
                    lp_ctl[CTL_IN_SOURCE] == 0:
                k = _quiet_cycles(st, block_rows, n_cycles - i)
                if is_stream and lp_ctl[CTL_LOADING] == 1:
                    k = min(k, lp_ctl[CTL_LOAD_END] - t)
                if k > 0:
                    _fast_forward(st, block_rows, t, k, cfg[CFG_HISTORY_MASK], series, depth_series, i, waiting)
                    lp_ctl[CTL_WAIT] += waiting * (k - 1)
                    i += k
                    continue
        lo = ev_cycle_lo[i]
        hi = ev_cycle_lo[i + 1]
        for k in prange(n_blocks):
            b = (k * stride) % n_blocks  # (see `stride`, _run_setup)
            r0 = block_rows[b]
            r1 = block_rows[b + 1]
            # This block's slice of the cycle's trace events (sorted by unit).
            e0 = lo + np.searchsorted(ev_unit[lo:hi], r0 * cols)
            e1 = lo + np.searchsorted(ev_unit[lo:hi], r1 * cols)
            _step_rows(r0, r1, t, st, cfg, seed, key_inject, key_migrate, key_dest, ev_unit, ev_work, e0, e1, acc[b],
                       dh[b], lat_hist_blocks[b], scratch[b], arrivals[b], flags[b], done_ev[b], took[b])
        _merge_blocks(series, n_blocks, acc, i)
        if is_lp:
            _pipeline_finish(series, n_blocks, lp_w, lp_reg, lp_rep, lp_fin, lp_done, lp_admit_t, lp_took, lp_ctl,
                             n_rep, took, done_ev, i, t, waiting)
        _merge_depths_and_totals(series, depth_series, cum, n_blocks, dh, i)
        # (Control messages on links carry no task or packet.)
        if cum[0] != (cum[1] + series[i, S_QUEUED] + series[i, S_IN_SERVICE] + series[i, S_PKT_IN_SOURCE]
                      + series[i, S_PKT_IN_ROUTER] + cum[3] - cum[5] + cum[2] + cum[4]):
            return t
        i += 1
    return -1


def _run_setup(st, cfg, block_rows, depth_series):
    """The blocks' work space, the pipeline's state by name (bound outside the prange loop: see
    MeshState), and the stride at which the loop visits the blocks.
    """
    n_blocks = block_rows.shape[0] - 1
    acc = np.zeros((n_blocks, N_SERIES), np.int64)
    dh = np.zeros((n_blocks, 4, depth_series.shape[1]), np.int64)
    scratch = np.zeros((n_blocks, 6, 4), np.int64)
    cols = st.q_len.shape[1]
    arrivals = np.zeros((n_blocks, cols), np.uint32)
    flags = np.zeros((n_blocks, 4, cols), np.uint8)
    is_lp = cfg[CFG_IS_PIPELINE]
    lp_w = cfg[CFG_CHUNKS_IN_FLIGHT]
    # (Bound here, outside the prange loop below: see MeshState.)
    lp_reg = st.lp_reg
    lp_rep = st.lp_rep
    lp_adm = st.lp_adm
    lp_fin = st.lp_fin
    lp_done = st.lp_done
    lp_admit_t = st.lp_admit_t
    lp_took = st.lp_took
    lp_ctl = st.lp_ctl
    is_stream = cfg[CFG_WEIGHT_STREAMING]
    per_pass = cfg[CFG_CHUNKS_PER_PASS]
    load_cycles = cfg[CFG_LOAD_CYCLES]
    fast_forward = cfg[CFG_FAST_FORWARD]
    n_rep = lp_adm.shape[0]
    took = np.zeros((n_blocks, n_rep), np.int64)
    # Per block: how many output-edge PEs of last regions it holds at most (one per row and replica).
    most_rows = 0
    for b in range(n_blocks):
        most_rows = max(most_rows, block_rows[b + 1] - block_rows[b])
    done_ev = np.zeros((n_blocks, 1 + (most_rows * n_rep if is_lp else 0)), np.int64)
    # Threads take contiguous runs of the loop's index, and the loop visits the blocks with a stride
    # of about 0.62 of their number (coprime with it, so each once): every thread's run is spread
    # over the whole grid, and the work shares evenly where the activity is only in some rows (a
    # pipeline filling from the top, a hot spot). Which thread steps a block changes no result.
    stride = max(1, (n_blocks * 618) // 1000)
    while math.gcd(stride, n_blocks) != 1:
        stride += 1
    return (n_blocks, acc, dh, scratch, cols, arrivals, flags, is_lp, lp_w, lp_reg, lp_rep, lp_adm, lp_fin, lp_done,
            lp_admit_t, lp_took, lp_ctl, is_stream, per_pass, load_cycles, fast_forward, n_rep, took, done_ev, stride)


def _pipeline_admit(lp_w, lp_reg, lp_rep, lp_adm, lp_fin, lp_admit_t, lp_took, lp_ctl, is_stream, per_pass, load_cycles,
                    n_rep, took, done_ev, t, waiting):
    """layer_pipeline, before the cycle: the weight buffers (weight streaming), then each replica
    admits a chunk once its first region has taken the last (at most W in flight).
    """
    if is_stream:
        # Weights: one layer loads at a time, into one of two buffers.
        if lp_ctl[CTL_LOADING] == 1 and t >= lp_ctl[CTL_LOAD_END]:
            lp_ctl[CTL_LOADED] += 1
            lp_ctl[CTL_LOADING] = 0
        if lp_ctl[CTL_LOADING] == 0 and lp_ctl[CTL_LOADED] <= lp_fin[0] // per_pass + 1:
            lp_ctl[CTL_LOADING] = 1
            lp_ctl[CTL_LOAD_END] = t + load_cycles
    # Admit a chunk once the first region has taken the last (at most W in flight).
    all_took = True
    for p in range(n_rep):
        first = lp_rep[p, 0]
        n_first = lp_reg[first, REG_HEIGHT] * lp_reg[first, REG_WIDTH]
        ok = lp_adm[p] < lp_fin[p] + lp_w and lp_took[p] == n_first
        if ok and is_stream and lp_adm[p] % per_pass == 0:
            ok = lp_fin[p] == lp_adm[p] and lp_adm[p] // per_pass < lp_ctl[CTL_LOADED]
        if ok:
            lp_admit_t[p, lp_adm[p] % lp_w] = t
            lp_adm[p] += 1
            lp_took[p] = 0
        if lp_took[p] != n_first:
            all_took = False
    if is_stream and lp_fin[0] == lp_adm[0] and lp_adm[0] % per_pass == 0 and \
            lp_adm[0] // per_pass >= lp_ctl[CTL_LOADED]:
        waiting = 1
        lp_ctl[CTL_WAIT] += 1
    done_ev[:, 0] = 0
    took[:, :] = 0
    return waiting, all_took


def _merge_blocks(series, n_blocks, acc, i):
    """The cycle's series row: the blocks' observables merged in a fixed order."""
    # Merge blocks in a fixed order (integer sums: exact in any order anyway).
    for j in range(N_SERIES):
        series[i, j] = 0
    for b in range(n_blocks):
        for j in range(N_SERIES):
            if j == S_LATENCY_MAX or j == S_MEAS_LATENCY_MAX:
                if acc[b, j] > series[i, j]:
                    series[i, j] = acc[b, j]
            else:
                series[i, j] += acc[b, j]


def _pipeline_finish(series, n_blocks, lp_w, lp_reg, lp_rep, lp_fin, lp_done, lp_admit_t, lp_took, lp_ctl, n_rep, took,
                     done_ev, i, t, waiting):
    """layer_pipeline, after the cycle: the chunks the blocks took and finished, each chunk done
    once every output-edge PE of its replica's last region has completed it.
    """
    # Finish: a chunk is done when every output-edge PE of its replica's last region has completed it.
    for b in range(n_blocks):
        for p in range(n_rep):
            lp_took[p] += took[b, p]
        for e in range(1, done_ev[b, 0] + 1):
            lp_done[done_ev[b, e] % n_rep, (done_ev[b, e] // n_rep) % lp_w] += 1
    for p in range(n_rep):
        n_last = _n_out(lp_reg, lp_rep[p, 1])
        while lp_done[p, lp_fin[p] % lp_w] == n_last:
            w = lp_fin[p] % lp_w
            lp_done[p, w] = 0
            series[i, S_CHUNKS_FINISHED] += 1
            series[i, S_CHUNK_LATENCY_SUM] += t + 1 - lp_admit_t[p, w]
            lp_fin[p] += 1
    series[i, S_WEIGHT_WAIT] = waiting
    # Output stages hold every packet offered and not yet injected (copies are both at once).
    series[i, S_PKT_IN_SOURCE] = lp_ctl[CTL_IN_SOURCE] + series[i, S_PKT_OFFERED] - series[i, S_PKT_INJECTED]
    lp_ctl[CTL_IN_ROUTER] = series[i, S_PKT_IN_ROUTER]
    lp_ctl[CTL_IN_SOURCE] = series[i, S_PKT_IN_SOURCE]


def _merge_depths_and_totals(series, depth_series, cum, n_blocks, dh, i):
    """The cycle's depth histogram and the running totals the conservation check reads."""
    for q in range(depth_series.shape[1]):
        v = 0
        for b in range(n_blocks):
            for lane in range(4):
                v += dh[b, lane, q]
        depth_series[i, q] = v
    cum[0] += series[i, S_INJECTED] + series[i, S_PKT_OFFERED]
    cum[1] += series[i, S_REFUSED]
    cum[2] += series[i, S_COMPLETED]
    cum[3] += series[i, S_LINK_SENT] - series[i, S_LINK_RECEIVED]
    cum[4] += series[i, S_PKT_DELIVERED]
    cum[5] += series[i, S_CONTROL_SENT] - series[i, S_CONTROL_RECEIVED]
    series[i, S_IN_FLIGHT] = cum[3]


def _step_rows(r0, r1, t, st, cfg, seed, key_inject, key_migrate, key_dest, ev_unit, ev_work, ev_lo, ev_hi, acc,
               dhist, lhist, scratch, arrivals, flags, done_ev, took):
    """Advance rows r0..r1-1 by cycle t; add this block's observables into acc, dhist, lhist.

    st: the state (MeshState). cfg: int64 vector, indices CFG_* (mesh_config). acc: int64[N_SERIES];
    dhist: int64[4, Q+1] (summed over its first axis); lhist: int64[n_bins] (last bin = overflow);
    scratch: int64[6, 4], arrivals: uint32[C], and flags: uint8[4, C], work space. For
    traffic runs lhist holds the
    latencies of measured packets. done_ev: int64[1 + n], layer_pipeline: the count, then the
    chunks completed by output-edge PEs of last regions (chunk x replicas + replica); took: int64[P],
    the PEs of first regions that took their replica's newest chunk in the cycle. Reads other PEs
    only through history slots of earlier cycles, and the replicas' admitted chunks as set before
    the cycle.
    """
    (q_work, q_birth, q_hops, q_len, s_rem, s_birth, s_hops, link, sent_h, recv_h, depth_h, tot_started,
     tot_injected, tot_refused, tot_completed, tot_out, tot_in, tot_latency, thr, geo_log, sent_h32,
     recv_h32, src_pending, src_scan, tot_pkt_offered, tot_pkt_delivered, link_total, oq, oq_len,
     oq_len64, lp_g, lp_reg, lp_taken, out_left, out_birth, lp_got, lp_adm) = _state_arrays(st)
    (rows, cols, cap, bw, kbuf, policy, threshold, max_mig, work_kind, work_fixed, work_min, work_max,
     is_trace, hmask, is_traffic, pattern, hot_thr, hot_r, hot_c, warmup, measure_end, qo, is_lp, n_rep,
     routed, wrap, n_bins, s_now, s_prev, s_lat, s_cred, s_info, work_span) = _configuration(
            t, cfg, lhist, q_len, lp_adm)
    rc4, link_f, sent_f, recv_f, oq_f, oql_f, lt_f, per_link, qcap, b_lat, b_cred = _flat_views(
            link, sent_h, recv_h, link_total, oq, oq_len, rows, cols, s_lat, s_cred)

    (busy, queued, in_service, injected, refused, completed, migrated, received, lat_sum, lat_sq, hops_sum,
     lat_max, link_sent, link_received, pk_offered, pk_injected, pk_delivered, pk_in_source, pk_in_router,
     meas_injected, meas_wait, meas_hops, meas_delivered, meas_lat_sum, meas_lat_sq, meas_lat_max, ctl_sent,
     ctl_received, ep) = _counters(ev_lo, acc)
    (sent_now, known, elig, mig_now, quota, kp, offer_f, simple_f, nb_min, p_min, seg_chg, seg_idle,
     seg_live, n_seg, t_calm) = _work_space(t, st, scratch, flags, hmask)
    (check_nb, hyst, stop, shed, mig_dir, count_dirs, diffusion, gradient, press_h, alpha, stealing,
     push, steal) = _policy_flags(st, cfg, rows, cols, policy, threshold)

    for r in range(r0, r1):
        (ql_r, rem_r, thr_r, dep_now, rv_row, rv_now, sent_prev, sent_now_row, up, down, same, up_mask,
         down_mask, i_up, i_down, i_same, p_up, p_down, p_same, p_now, um, dm, oql_r, pend_r, g_r, left_r,
         chg_prev, chg_now, chg_up, chg_down, stl_r) = _row_views(t, q_len, s_rem, depth_h, thr, sent_h32, recv_h32,
                                                                  src_pending, oq_len64, lp_g, out_left, rows,
                                                                  is_traffic, is_lp, routed, s_now, s_prev, s_lat,
                                                                  s_info, seg_chg, gradient, press_h, stealing, steal,
                                                                  r)
        for sg in range(n_seg):
            c0 = sg * SEG
            c1 = min(c0 + SEG, cols)
            a0 = np.uint64(c0)
            a1 = np.uint64(c1)
            if is_trace:
                # This segment's trace events this cycle (sorted by unit): the first at or after ep.
                has_ev = ep < ev_hi and ev_unit[ep] < r * cols + c1
            else:
                has_ev = False
            # A quiet segment: every PE idle at the end of the last cycle, none that can be offered
            # work, and no send count, receive count or depth of it or of the segments around it
            # changed in the last H cycles. Its PEs have nothing arriving (docs/mesh.md,
            # "Implementation notes") and every history slot already holds their counts: the cycle
            # leaves them as they are, and they add only idle PEs to the depth histogram.
            # (With work_stealing an idle PE with no request outstanding asks: no segment is quiet.)
            if seg_idle[r, sg] == 1 and seg_live[r, sg] == 0 and not has_ev and not stealing and \
                    chg_prev[sg] <= t_calm and \
                    (sg == 0 or chg_prev[sg - 1] <= t_calm) and (sg + 1 == n_seg or chg_prev[sg + 1] <= t_calm) and \
                    chg_up[sg] <= t_calm and chg_down[sg] <= t_calm:
                chg_now[sg] = chg_prev[sg]
                dhist[0, 0] += c1 - c0
                continue

            (busy, queued, in_service, injected, refused, completed, migrated, received, lat_sum, lat_sq,
             hops_sum, lat_max, link_sent, link_received, pk_offered, pk_injected, pk_delivered, pk_in_source,
             pk_in_router, meas_injected, meas_wait, meas_hops, meas_delivered, meas_lat_sum, meas_lat_sq,
             meas_lat_max, ctl_sent, ctl_received, ep) = _segment(t, seed, key_inject, key_migrate, key_dest, ev_unit,
                                                                  ev_work, ev_hi, dhist, lhist, arrivals, done_ev, took,
                                                                  q_work, q_birth, q_hops, q_len, s_rem, s_birth,
                                                                  s_hops, depth_h, tot_started, tot_injected,
                                                                  tot_refused, tot_completed, tot_out, tot_in,
                                                                  tot_latency, thr, geo_log, src_pending, src_scan,
                                                                  tot_pkt_offered, tot_pkt_delivered, oq_len64, lp_g,
                                                                  lp_reg, lp_taken, out_left, out_birth, lp_got, lp_adm,
                                                                  rows, cols, cap, bw, kbuf, policy, threshold, max_mig,
                                                                  work_kind, work_fixed, work_min, work_max, is_trace,
                                                                  is_traffic, pattern, hot_thr, hot_r, hot_c, warmup,
                                                                  measure_end, qo, is_lp, n_rep, routed, wrap, n_bins,
                                                                  s_now, s_info, work_span, rc4, link_f, sent_f, recv_f,
                                                                  oq_f, oql_f, lt_f, per_link, qcap, b_lat, b_cred,
                                                                  busy, queued, in_service, injected, refused,
                                                                  completed, migrated, received, lat_sum, lat_sq,
                                                                  hops_sum, lat_max, link_sent, link_received,
                                                                  pk_offered, pk_injected, pk_delivered, pk_in_source,
                                                                  pk_in_router, meas_injected, meas_wait, meas_hops,
                                                                  meas_delivered, meas_lat_sum, meas_lat_sq,
                                                                  meas_lat_max, ctl_sent, ctl_received, ep, sent_now,
                                                                  known, elig, mig_now, quota, kp, offer_f, simple_f,
                                                                  nb_min, p_min, seg_idle, seg_live, check_nb, hyst,
                                                                  stop, shed, mig_dir, count_dirs, diffusion, gradient,
                                                                  press_h, alpha, stealing, push, steal, r, ql_r, rem_r,
                                                                  thr_r, dep_now, rv_row, rv_now, sent_prev,
                                                                  sent_now_row, up, down, same, up_mask, down_mask,
                                                                  i_up, i_down, i_same, p_up, p_down, p_same, p_now, um,
                                                                  dm, oql_r, pend_r, g_r, left_r, chg_prev, chg_now,
                                                                  stl_r, sg, c0, c1, a0, a1)

    _add_counters(acc, busy, queued, in_service, injected, refused, completed, migrated, received, lat_sum, lat_sq,
                  hops_sum, lat_max, link_sent, link_received, pk_offered, pk_injected, pk_delivered, pk_in_source,
                  pk_in_router, meas_injected, meas_wait, meas_hops, meas_delivered, meas_lat_sum, meas_lat_sq,
                  meas_lat_max, ctl_sent, ctl_received)


def _state_arrays(st):
    """The state's arrays (MeshState), each by its name in the steps."""
    q_work = st.q_work
    q_birth = st.q_birth
    q_hops = st.q_hops
    q_len = st.q_len
    s_rem = st.s_rem
    s_birth = st.s_birth
    s_hops = st.s_hops
    link = st.link
    sent_h = st.sent_h
    recv_h = st.recv_h
    depth_h = st.depth_h
    tot_started = st.tot_started
    tot_injected = st.tot_injected
    tot_refused = st.tot_refused
    tot_completed = st.tot_completed
    tot_out = st.tot_migrated_out
    tot_in = st.tot_migrated_in
    tot_latency = st.tot_latency
    thr = st.thr
    geo_log = st.geo_log
    sent_h32 = st.sent_h32
    recv_h32 = st.recv_h32
    src_pending = st.src_pending
    src_scan = st.src_scan
    tot_pkt_offered = st.tot_pkt_offered
    tot_pkt_delivered = st.tot_pkt_delivered
    link_total = st.link_total
    oq = st.oq
    oq_len = st.oq_len
    oq_len64 = st.oq_len64
    lp_g = st.lp_g
    lp_reg = st.lp_reg
    lp_taken = st.lp_taken
    out_left = st.out_left
    out_birth = st.out_birth
    lp_got = st.lp_got
    lp_adm = st.lp_adm
    return (q_work, q_birth, q_hops, q_len, s_rem, s_birth, s_hops, link, sent_h, recv_h, depth_h, tot_started,
            tot_injected, tot_refused, tot_completed, tot_out, tot_in, tot_latency, thr, geo_log, sent_h32, recv_h32,
            src_pending, src_scan, tot_pkt_offered, tot_pkt_delivered, link_total, oq, oq_len, oq_len64, lp_g, lp_reg,
            lp_taken, out_left, out_birth, lp_got, lp_adm)


def _configuration(t, cfg, lhist, q_len, lp_adm):
    """The run's configuration (cfg, indices CFG_*) and what follows from it and from t: the grid's size,
    the history slots this cycle reads and writes.
    """
    rows = q_len.shape[0]
    cols = q_len.shape[1]
    cap = cfg[CFG_QUEUE_CAPACITY]
    hop_lat = cfg[CFG_HOP_LATENCY_CYCLES]
    bw = cfg[CFG_LINK_MESSAGES_PER_CYCLE]
    kbuf = cfg[CFG_LINK_BUFFER_MESSAGES]
    credit_delay = cfg[CFG_CREDIT_DELAY_CYCLES]
    policy = cfg[CFG_POLICY]
    threshold = cfg[CFG_THRESHOLD]
    info_delay = cfg[CFG_INFO_DELAY_CYCLES]
    max_mig = cfg[CFG_MAX_PER_CYCLE]
    work_kind = cfg[CFG_WORK_KIND]
    work_fixed = cfg[CFG_WORK_CYCLES]
    work_min = cfg[CFG_WORK_MIN_CYCLES]
    work_max = cfg[CFG_WORK_MAX_CYCLES]
    is_trace = cfg[CFG_IS_TRACE]
    hmask = cfg[CFG_HISTORY_MASK]
    is_traffic = cfg[CFG_IS_TRAFFIC]
    pattern = cfg[CFG_PATTERN]
    hot_thr = cfg[CFG_HOT_THRESHOLD]
    hot_r = cfg[CFG_HOT_ROW]
    hot_c = cfg[CFG_HOT_COL]
    warmup = cfg[CFG_WARMUP_CYCLES]
    measure_end = cfg[CFG_MEASURE_END]
    qo = cfg[CFG_ROUTER_QUEUE_PACKETS]
    is_lp = cfg[CFG_IS_PIPELINE]
    n_rep = lp_adm.shape[0]
    routed = is_traffic or is_lp
    wrap = 2 * kbuf
    n_bins = lhist.shape[0]
    s_now = t & hmask
    s_prev = (t - 1) & hmask
    s_lat = (t - hop_lat) & hmask
    s_cred = (t - credit_delay) & hmask
    s_info = (t - info_delay) & hmask
    work_span = np.uint64(work_max - work_min + 1)
    return (rows, cols, cap, bw, kbuf, policy, threshold, max_mig, work_kind, work_fixed, work_min, work_max, is_trace,
            hmask, is_traffic, pattern, hot_thr, hot_r, hot_c, warmup, measure_end, qo, is_lp, n_rep, routed, wrap,
            n_bins, s_now, s_prev, s_lat, s_cred, s_info, work_span)


def _flat_views(link, sent_h, recv_h, link_total, oq, oq_len, rows, cols, s_lat, s_cred):
    """Flat views of the link and router arrays, indexed by PE u = r * cols + c: fewer index
    multiplications on the paths that every message takes (layout in kernels/mesh.py's docstring).
    """
    # Flat views of the link and router arrays, indexed by PE u = r * cols + c: fewer index
    # multiplications on the paths that every message takes (layout in the module docstring).
    rc4 = 4 * rows * cols
    link_f = link.reshape(link.size)  # (4u + o) * kbuf + i
    sent_f = sent_h.reshape(sent_h.size)  # slot * rc4 + 4u + o
    recv_f = recv_h.reshape(recv_h.size)
    oq_f = oq.reshape(oq.size)  # (5u + o) * qcap + i
    oql_f = oq_len.reshape(oq_len.size)  # 8u + o
    lt_f = link_total.reshape(link_total.size)  # 4u + o
    per_link = link_total.size == rc4
    qcap = oq.shape[3]
    b_lat = s_lat * rc4
    b_cred = s_cred * rc4
    return rc4, link_f, sent_f, recv_f, oq_f, oql_f, lt_f, per_link, qcap, b_lat, b_cred


def _counters(ev_lo, acc):
    """The block's observables, counted in locals and added into acc at the end (_add_counters)."""
    busy = 0
    queued = 0
    in_service = 0
    injected = 0
    refused = 0
    completed = 0
    migrated = 0
    received = 0
    lat_sum = 0
    lat_sq = 0
    hops_sum = 0
    lat_max = acc[S_LATENCY_MAX]
    link_sent = 0
    link_received = 0
    pk_offered = 0
    pk_injected = 0
    pk_delivered = 0
    pk_in_source = 0
    pk_in_router = 0
    meas_injected = 0
    meas_wait = 0
    meas_hops = 0
    meas_delivered = 0
    meas_lat_sum = 0
    meas_lat_sq = 0
    meas_lat_max = acc[S_MEAS_LATENCY_MAX]
    ctl_sent = 0
    ctl_received = 0
    ep = ev_lo
    return (busy, queued, in_service, injected, refused, completed, migrated, received, lat_sum, lat_sq, hops_sum,
            lat_max, link_sent, link_received, pk_offered, pk_injected, pk_delivered, pk_in_source, pk_in_router,
            meas_injected, meas_wait, meas_hops, meas_delivered, meas_lat_sum, meas_lat_sq, meas_lat_max, ctl_sent,
            ctl_received, ep)


def _work_space(t, st, scratch, flags, hmask):
    """The work space (scratch, flags) by name, and the segments' change and idle records."""
    sent_now = scratch[0]
    known = scratch[1]
    elig = scratch[2]
    mig_now = scratch[3]
    quota = scratch[4]
    kp = scratch[5]
    offer_f = flags[0]
    simple_f = flags[1]
    nb_min = flags[2]
    p_min = flags[3]
    seg_chg = st.seg_chg
    seg_idle = st.seg_idle
    seg_live = st.seg_live
    n_seg = seg_idle.shape[1]
    t_calm = t - (hmask + 1)  # a segment unchanged since then has the same counts in every history slot
    return (sent_now, known, elig, mig_now, quota, kp, offer_f, simple_f, nb_min, p_min, seg_chg, seg_idle, seg_live,
            n_seg, t_calm)


def _policy_flags(st, cfg, rows, cols, policy, threshold):
    """What the migration policy and its keys make of the cycle: the hysteresis limit, the policy's
    own state (meshsim/mesh/policies.py lists it) and which PEs step 4 concerns.
    """
    check_nb = policy != POLICY_NONE
    # Hysteresis: a shedding PE migrates down to `stop`, the others only above `threshold`. A PE's
    # flag implies a queue longer than `stop` at the end of every cycle, and a queue longer than
    # `threshold` implies the flag: a PE that does nothing this cycle keeps its flag as it is.
    # (Without hysteresis stop = threshold, and the flags are neither read nor written.)
    hyst = cfg[CFG_HYSTERESIS] if check_nb else 0
    stop = threshold - hyst
    shed = st.shed
    mig_dir = st.tot_mig_dir
    count_dirs = mig_dir.shape[0] == rows and mig_dir.shape[1] == cols
    diffusion = policy == POLICY_DIFFUSION
    gradient = policy == POLICY_GRADIENT
    press_h = st.press_h
    alpha = cfg[CFG_DIFFUSION_RATE]
    # work_stealing moves tasks only as answers to requests (step 4): no PE pushes, and what makes a
    # PE take part is its steal state, not its depth.
    stealing = policy == POLICY_WORK_STEALING
    push = check_nb and not stealing
    steal = st.steal
    return check_nb, hyst, stop, shed, mig_dir, count_dirs, diffusion, gradient, press_h, alpha, stealing, push, steal


def _row_views(t, q_len, s_rem, depth_h, thr, sent_h32, recv_h32, src_pending, oq_len64, lp_g, out_left, rows,
               is_traffic, is_lp, routed, s_now, s_prev, s_lat, s_info, seg_chg, gradient, press_h, stealing, steal, r):
    """Row r's views of the state and of its neighbours' history slots, indexed below by unsigned
    column indices (no negative-index code: the loops vectorise).
    """
    # Row views, indexed below by unsigned column indices (no negative-index code: the loops vectorise).
    ql_r = q_len[r]
    rem_r = s_rem[r]
    thr_r = thr[r]
    dep_now = depth_h[s_now, r]
    rv_row = recv_h32[s_prev, r]
    rv_now = recv_h32[s_now, r]
    sent_prev = sent_h32[s_prev, r]
    sent_now_row = sent_h32[s_now, r]
    up = sent_h32[s_lat, max(r - 1, 0)]
    down = sent_h32[s_lat, min(r + 1, rows - 1)]
    same = sent_h32[s_lat, r]
    up_mask = np.uint32(0xFF) if r > 0 else np.uint32(0)
    down_mask = np.uint32(0xFF) if r + 1 < rows else np.uint32(0)
    i_up = depth_h[s_info, max(r - 1, 0)]
    i_down = depth_h[s_info, min(r + 1, rows - 1)]
    i_same = depth_h[s_info, r]
    pr = r if gradient else 0
    p_up = press_h[s_info if gradient else 0, max(pr - 1, 0)]
    p_down = press_h[s_info if gradient else 0, min(pr + 1, press_h.shape[1] - 1)]
    p_same = press_h[s_info if gradient else 0, pr]
    p_now = press_h[s_now if gradient else 0, pr]
    um = np.uint8(0) if r > 0 else np.uint8(0xFF)
    dm = np.uint8(0) if r + 1 < rows else np.uint8(0xFF)
    rr = r if routed else 0
    oql_r = oq_len64[rr]
    pend_r = src_pending[r if is_traffic else 0]
    lr = r if is_lp else 0
    g_r = lp_g[lr]
    left_r = out_left[lr]
    chg_prev = seg_chg[(t - 1) & 1, r]
    chg_now = seg_chg[t & 1, r]
    chg_up = seg_chg[(t - 1) & 1, max(r - 1, 0)]
    chg_down = seg_chg[(t - 1) & 1, min(r + 1, rows - 1)]
    stl_r = steal[r if stealing else 0]
    return (ql_r, rem_r, thr_r, dep_now, rv_row, rv_now, sent_prev, sent_now_row, up, down, same, up_mask, down_mask,
            i_up, i_down, i_same, p_up, p_down, p_same, p_now, um, dm, oql_r, pend_r, g_r, left_r, chg_prev, chg_now,
            chg_up, chg_down, stl_r)


def _arrivals(arrivals, cols, rv_row, rv_now, sent_prev, sent_now_row, up, down, same, up_mask, down_mask, a0, a1):
    """The row pass: which input links of each PE hold a message sent at t - L or earlier that it
    has not received.
    """
    # Row pass: which input links of each PE hold a message sent at t - L or earlier that it
    # has not received? Compares the neighbours' send counts (as at t - L) with the PE's own
    # receive counts, one byte of each 4-count word per direction; written to vectorise.
    # Plainly: byte d of arrivals[c] is nonzero iff sent[n_d, opp(d)](t - L) != recv[(r, c), d](t - 1)
    # (always zero where there is no neighbour d). The counts carry over to this cycle's slot
    # unless a PE changes them below.
    for c in range(a0, a1):
        rv = rv_row[c]
        arrivals[c] = (((up[c] >> np.uint32(16)) ^ rv) & up_mask) | (
            ((down[c] ^ (rv >> np.uint32(16))) & down_mask) << np.uint32(16))
        rv_now[c] = rv
        sent_now_row[c] = sent_prev[c]
    for c in range(a0, min(a1, np.uint64(cols - 1))):
        arrivals[c] |= (((same[c + np.uint64(1)] >> np.uint32(24)) ^ (rv_row[c] >> np.uint32(8))) &
                        np.uint32(0xFF)) << np.uint32(8)
    for c in range(max(a0, np.uint64(1)), a1):
        arrivals[c] |= (((same[c - np.uint64(1)] >> np.uint32(8)) ^ (rv_row[c] >> np.uint32(24))) &
                        np.uint32(0xFF)) << np.uint32(24)


def _segment(t, seed, key_inject, key_migrate, key_dest, ev_unit, ev_work, ev_hi, dhist, lhist, arrivals, done_ev, took,
             q_work, q_birth, q_hops, q_len, s_rem, s_birth, s_hops, depth_h, tot_started, tot_injected, tot_refused,
             tot_completed, tot_out, tot_in, tot_latency, thr, geo_log, src_pending, src_scan, tot_pkt_offered,
             tot_pkt_delivered, oq_len64, lp_g, lp_reg, lp_taken, out_left, out_birth, lp_got, lp_adm, rows, cols, cap,
             bw, kbuf, policy, threshold, max_mig, work_kind, work_fixed, work_min, work_max, is_trace, is_traffic,
             pattern, hot_thr, hot_r, hot_c, warmup, measure_end, qo, is_lp, n_rep, routed, wrap, n_bins, s_now, s_info,
             work_span, rc4, link_f, sent_f, recv_f, oq_f, oql_f, lt_f, per_link, qcap, b_lat, b_cred, busy, queued,
             in_service, injected, refused, completed, migrated, received, lat_sum, lat_sq, hops_sum, lat_max,
             link_sent, link_received, pk_offered, pk_injected, pk_delivered, pk_in_source, pk_in_router, meas_injected,
             meas_wait, meas_hops, meas_delivered, meas_lat_sum, meas_lat_sq, meas_lat_max, ctl_sent, ctl_received, ep,
             sent_now, known, elig, mig_now, quota, kp, offer_f, simple_f, nb_min, p_min, seg_idle, seg_live, check_nb,
             hyst, stop, shed, mig_dir, count_dirs, diffusion, gradient, press_h, alpha, stealing, push, steal, r, ql_r,
             rem_r, thr_r, dep_now, rv_row, rv_now, sent_prev, sent_now_row, up, down, same, up_mask, down_mask, i_up,
             i_down, i_same, p_up, p_down, p_same, p_now, um, dm, oql_r, pend_r, g_r, left_r, chg_prev, chg_now, stl_r,
             sg, c0, c1, a0, a1):
    """One segment of row r (columns c0..c1-1) that is not quiet: the row pass, the vector pass over
    its PEs, then steps 1-6 for each PE with something to do (docs/mesh.md, "One cycle"), then
    what the next cycles need to know to skip it.
    """
    _arrivals(arrivals, cols, rv_row, rv_now, sent_prev, sent_now_row, up, down, same, up_mask, down_mask, a0,
              a1)
    deepest = _vector_pass(key_inject, ev_unit, ev_hi, lp_g, lp_reg, rows, cols, is_trace, is_traffic, is_lp,
                           s_info, ep, offer_f, nb_min, p_min, seg_live, stop, gradient, press_h, stealing,
                           push, r, ql_r, rem_r, thr_r, i_up, i_down, i_same, p_up, p_down, p_same, um, dm,
                           oql_r, pend_r, g_r, left_r, stl_r, sg, c0, c1, a0, a1)
    busy, queued, in_service, todo_bits, seg_busy, all_simple, moved_before, q_moved = _simple_pass(
            dhist, arrivals, cap, busy, queued, in_service, link_sent, link_received, offer_f, simple_f, nb_min,
            p_min, stop, gradient, ql_r, rem_r, dep_now, p_now, c0, c1, a0, a1, deepest)
    ahead, lead = _prefetch_segment(tot_pkt_offered, tot_pkt_delivered, lp_got, is_lp, routed, r, c0, c1,
                                    todo_bits)
    while todo_bits != 0:
        ahead, lead = _prefetch_ahead(q_work, q_birth, s_birth, tot_started, tot_injected, tot_completed,
                                      tot_latency, cols, kbuf, routed, link_f, lt_f, r, rem_r, c0, ahead, lead)
        c, todo_bits, u, i_now, qlen, ql_start, offer, eject_now, stv = _pe_setup(
                key_inject, q_len, thr, cols, is_traffic, routed, s_now, rc4, sent_now, offer_f, stealing,
                steal, r, c0, todo_bits)

        (injected, received, link_sent, link_received, pk_offered, pk_injected, pk_delivered,
         meas_injected, meas_hops, meas_delivered, meas_lat_sum, meas_lat_sq, meas_lat_max,
         ctl_received, qlen, eject_now, stv) = _receive(t, arrivals, q_work, q_birth, q_hops, tot_injected,
                                                        tot_in, tot_pkt_offered, tot_pkt_delivered, lp_g,
                                                        lp_reg, lp_got, cols, cap, bw, kbuf, qo, is_lp, routed,
                                                        wrap, link_f, sent_f, recv_f, oq_f, oql_f, lt_f,
                                                        per_link, qcap, b_lat, b_cred, injected, received,
                                                        link_sent, link_received, pk_offered, pk_injected,
                                                        pk_delivered, meas_injected, meas_hops, meas_delivered,
                                                        meas_lat_sum, meas_lat_sq, meas_lat_max, ctl_received,
                                                        sent_now, check_nb, stealing, r, c, u, i_now, qlen,
                                                        eject_now, stv)

        (injected, refused, link_sent, pk_offered, pk_injected, pk_in_source, meas_injected, meas_wait,
         meas_hops, ep, qlen) = _inject(t, seed, key_inject, key_dest, ev_unit, ev_work, ev_hi, took, q_work,
                                        q_birth, q_hops, tot_injected, tot_refused, thr, geo_log, src_pending,
                                        src_scan, tot_pkt_offered, lp_g, lp_reg, lp_taken, out_left, out_birth,
                                        lp_adm, rows, cols, cap, bw, kbuf, work_kind, work_fixed, work_min,
                                        work_max, is_trace, is_traffic, pattern, hot_thr, hot_r, hot_c, warmup,
                                        measure_end, qo, is_lp, wrap, work_span, link_f, sent_f, recv_f, oq_f,
                                        oql_f, lt_f, per_link, qcap, b_cred, injected, refused, link_sent,
                                        pk_offered, pk_injected, pk_in_source, meas_injected, meas_wait,
                                        meas_hops, ep, sent_now, r, c, u, i_now, qlen, offer)

        (injected, link_sent, pk_delivered, pk_in_router, meas_delivered, meas_lat_sum,
         meas_lat_sq, meas_lat_max, qlen) = _send_stage(t, lhist, q_work, q_birth, q_hops, tot_injected,
                                                        tot_pkt_delivered, oq_len64, lp_g, lp_reg, lp_got, cols,
                                                        cap, bw, kbuf, is_traffic, warmup, measure_end, is_lp,
                                                        routed, wrap, n_bins, link_f, sent_f, recv_f, oq_f,
                                                        oql_f, lt_f, per_link, qcap, b_cred, injected,
                                                        link_sent, pk_delivered, pk_in_router, meas_delivered,
                                                        meas_lat_sum, meas_lat_sq, meas_lat_max, sent_now, r, c,
                                                        u, i_now, qlen, eject_now)

        if is_traffic:
            # Traffic runs hold no tasks: steps 3-5 have nothing to do (its depth, 0, is recorded).
            dhist[c & 3, 0] += 1
            continue

        rem, qlen = _start(q_work, q_birth, q_hops, s_rem, s_birth, s_hops, tot_started, out_left, is_lp, r, c,
                           qlen)

        migrated, link_sent, ctl_sent, qlen, stv = _migrate(key_migrate, q_work, q_birth, q_hops, depth_h,
                                                            tot_out, lp_g, lp_reg, rows, cols, bw, kbuf, policy,
                                                            threshold, max_mig, is_lp, routed, wrap, s_info,
                                                            link_f, sent_f, recv_f, lt_f, per_link, b_cred,
                                                            migrated, link_sent, ctl_sent, sent_now, known,
                                                            elig, mig_now, quota, kp, p_min, hyst, stop, shed,
                                                            mig_dir, count_dirs, diffusion, gradient, press_h,
                                                            alpha, stealing, steal, r, c, rem, u, i_now, qlen,
                                                            stv)

        busy, in_service, completed, lat_sum, lat_sq, hops_sum, lat_max, pk_offered, rem = _work(
                t, lhist, done_ev, s_rem, s_birth, s_hops, tot_completed, tot_latency, tot_pkt_offered, lp_g,
                lp_reg, out_left, out_birth, is_traffic, is_lp, n_rep, n_bins, busy, in_service, completed,
                lat_sum, lat_sq, hops_sum, lat_max, pk_offered, r, c, rem)

        queued, q_moved = _end_of_cycle(dhist, q_len, depth_h, s_now, queued, p_min, stop, gradient, r, p_now,
                                        c, q_moved, qlen, ql_start)

    # What the next cycles need to know to skip the segment: whether any count or depth of it
    # changed, and whether all its PEs are idle.
    if link_sent + link_received != moved_before or q_moved:
        chg_now[sg] = t
    else:
        chg_now[sg] = chg_prev[sg]
    seg_idle[r, sg] = all_simple and seg_busy == 0
    return (busy, queued, in_service, injected, refused, completed, migrated, received, lat_sum, lat_sq, hops_sum,
            lat_max, link_sent, link_received, pk_offered, pk_injected, pk_delivered, pk_in_source, pk_in_router,
            meas_injected, meas_wait, meas_hops, meas_delivered, meas_lat_sum, meas_lat_sq, meas_lat_max, ctl_sent,
            ctl_received, ep)


def _vector_pass(key_inject, ev_unit, ev_hi, lp_g, lp_reg, rows, cols, is_trace, is_traffic, is_lp, s_info, ep, offer_f,
                 nb_min, p_min, seg_live, stop, gradient, press_h, stealing, push, r, ql_r, rem_r, thr_r, i_up, i_down,
                 i_same, p_up, p_down, p_same, um, dm, oql_r, pend_r, g_r, left_r, stl_r, sg, c0, c1, a0, a1):
    """Which PEs have something to do this cycle, as flags over the segment, written to vectorise;
    the least depth known of a neighbour where a queue may migrate; the deepest queue.
    """
    # Which PEs have something to do this cycle? The others ("simple": nothing arrives,
    # nothing is offered, no task starts or completes, nothing to send, no migration
    # possible) only count down their task in service, done here for the whole segment at
    # once; the rest go through steps 1-6 below. Written to vectorise.
    deepest = np.uint8(0)
    if push:
        for c in range(a0, a1):
            deepest = max(deepest, ql_r[c])
    if deepest > stop and not gradient:
        # The least depth of a neighbour as known at t - D, plus 1 (255 where there is none, or
        # it is 255): with it >= the queue, step 4 finds no neighbour to migrate to. (Needed
        # only where a queue is longer than the threshold, or than `stop` for a shedding PE.)
        for c in range(a0, a1):
            nb_min[c] = min(i_up[c] | um, i_down[c] | dm)
        for c in range(max(a0, np.uint64(1)), a1):
            nb_min[c] = min(nb_min[c], i_same[c - np.uint64(1)])
        for c in range(a0, min(a1, np.uint64(cols - 1))):
            nb_min[c] = min(nb_min[c], i_same[c + np.uint64(1)])
        for c in range(a0, a1):
            nb_min[c] += np.uint8(nb_min[c] != 255)
    if gradient:
        _gradient_minima(lp_g, lp_reg, rows, cols, is_lp, s_info, nb_min, p_min, press_h, r, p_up, p_down,
                         p_same, um, dm, c0, c1, a0, a1)
    _offers(key_inject, ev_unit, ev_hi, lp_reg, cols, is_trace, is_traffic, is_lp, ep, offer_f, seg_live, r,
            thr_r, oql_r, pend_r, g_r, left_r, sg, c1, a0, a1)
    if stealing:
        _work_stealing_offers(lp_g, lp_reg, is_lp, offer_f, r, rem_r, stl_r, c0, c1)
    return deepest


def _offers(key_inject, ev_unit, ev_hi, lp_reg, cols, is_trace, is_traffic, is_lp, ep, offer_f, seg_live, r, thr_r,
            oql_r, pend_r, g_r, left_r, sg, c1, a0, a1):
    """Which PEs the workload may offer something this cycle (the draw of step 2, a trace event, a
    packet or chunk waiting).
    """
    if is_trace:
        for c in range(a0, a1):
            offer_f[c] = 0
        e = ep
        while e < ev_hi and ev_unit[e] < r * cols + c1:
            offer_f[ev_unit[e] - r * cols] = 1
            e += 1
    elif is_lp:
        # (First regions take chunks: never simple.)
        for c in range(a0, a1):
            offer_f[c] = np.uint8(oql_r[c] != 0) | np.uint8(left_r[c] != 0)
        if seg_live[r, sg] != 0:
            for c in range(a0, a1):
                g = np.int64(g_r[c])
                if g >= 0 and lp_reg[g, REG_FIRST] != 0:
                    offer_f[c] = 1
    else:
        # Bernoulli offers (the task path and routed traffic): the draw of step 2.
        ub = np.uint64(r * cols)
        for c in range(a0, a1):
            h = mix64(key_inject ^ ((ub + c) * G_UNIT))
            offer_f[c] = np.uint8((h >> S32) < np.uint64(thr_r[c]))
        if is_traffic:
            for c in range(a0, a1):
                offer_f[c] |= np.uint8(oql_r[c] != 0) | np.uint8(pend_r[c] != 0)


def _simple_pass(dhist, arrivals, cap, busy, queued, in_service, link_sent, link_received, offer_f, simple_f, nb_min,
                 p_min, stop, gradient, ql_r, rem_r, dep_now, p_now, c0, c1, a0, a1, deepest):
    """The simple PEs (nothing arrives, nothing is offered, no task starts or completes, nothing to
    send, no migration possible) count down their task in service here, for the whole segment at
    once, and add to the depth histogram; the others' bits are set in todo_bits.
    """
    # With no policy, or no queue above the threshold, no PE can migrate: ql <= shallow for all.
    # With hysteresis a shedding PE's limit is `stop`: every PE above it goes through step 4
    # (where those that are not shedding move nothing), so that the flags need not be read here.
    shallow = stop if deepest > stop else 255
    todo_bits = np.uint64(0)  # bit c - c0: PE c goes through steps 1-6
    h1 = 0  # simple PEs with 1, 2 and more tasks queued (for the depth histogram; the rest have 0)
    h2 = 0
    deep = 0
    dec_sum = 0  # simple PEs serving a task
    for c in range(a0, a1):
        ql = np.int64(ql_r[c])
        rem = np.int64(rem_r[c])
        quiet_mig = np.int64(ql <= shallow) | np.int64(np.int64(nb_min[c]) >= ql)
        s = np.int64(arrivals[c] == 0) & np.int64(offer_f[c] == 0) & quiet_mig & (
            np.int64(rem > 1) | np.int64(rem + ql == 0))
        simple_f[c] = np.uint8(s)
        todo_bits |= np.uint64(1 - s) << (c - a0)
        dec = s & np.int64(rem > 0)  # (a simple PE that is serving has more than 1 cycle left)
        rem_r[c] = np.uint16(rem - dec)
        dec_sum += dec
        dep_now[c] = np.uint8(ql)
        h1 += s & np.int64(ql == 1)
        h2 += s & np.int64(ql == 2)
        deep += s & np.int64(ql > 2)
    if gradient:
        # Every PE's pressure from its queue as it stands (the others write theirs again in step 6).
        for c in range(a0, a1):
            p_now[c] = np.uint8(0) if ql_r[c] <= stop else np.uint8(min(np.int64(p_min[c]) + 1, PRESSURE_NONE))
    busy += dec_sum
    in_service += dec_sum
    n_simple = (c1 - c0) - popcount(todo_bits)
    dhist[0, 0] += n_simple - h1 - h2 - deep
    dhist[0, 1] += h1
    queued += h1 + 2 * h2
    if cap >= 2:
        dhist[0, 2] += h2
    if deep > 0:
        for c in range(a0, a1):
            if simple_f[c] != 0 and ql_r[c] > 2:
                dhist[c & np.uint64(3), ql_r[c]] += 1
                queued += np.int64(ql_r[c])
    seg_busy = dec_sum + h1 + h2 + deep  # simple PEs that are not idle
    all_simple = todo_bits == 0
    moved_before = link_sent + link_received
    q_moved = False
    return busy, queued, in_service, todo_bits, seg_busy, all_simple, moved_before, q_moved


def _prefetch_segment(tot_pkt_offered, tot_pkt_delivered, lp_got, is_lp, routed, r, c0, c1, todo_bits):
    """Prefetches for the segment's PEs with something to do: the per-PE totals that packets
    update, a stream per array, and the start of the look-ahead over todo_bits.
    """
    # The lines steps 1-6 touch are far apart (one array per field, the neighbours' link
    # slots), and the grid's sweep has long evicted them: ask for a PE's a few PEs ahead of it.
    if routed and todo_bits != 0:
        # The per-PE totals and the wavelet counts that packets update, a stream per array.
        for k in range(c0, c1, 16):
            prefetch_write(tot_pkt_offered, (r, k))
            prefetch_write(tot_pkt_delivered, (r, k))
            if is_lp:
                prefetch_write(lp_got, (r, k))
    ahead = todo_bits  # the PEs whose lines are asked for, kept PF_AHEAD PEs ahead
    lead = 0
    return ahead, lead


def _prefetch_ahead(q_work, q_birth, s_birth, tot_started, tot_injected, tot_completed, tot_latency, cols, kbuf, routed,
                    link_f, lt_f, r, rem_r, c0, ahead, lead):
    """Ask for the lines of the PEs PF_AHEAD ahead of the one about to step: the link slots that
    messages wait in and the fields that starting, finishing or taking a task touch.
    """
    while ahead != 0 and lead <= PF_AHEAD:
        ca = c0 + trailing_zeros(ahead)
        ahead &= ahead - np.uint64(1)
        lead += 1
        if routed:
            # The link slots that messages wait in (written a cycle ago, and evicted by the
            # sweep over the grid since: every input's slot, since a branch per input would
            # be a coin flip; prefetches never fault, off the grid's edge included), and the
            # PE's own, which it writes when it passes them on.
            ua = r * cols + ca
            for d in range(4):
                prefetch(link_f, ((4 * _neighbour(ua, d, cols) + ((d + 2) & 3)) * kbuf,))
            prefetch_write(link_f, (4 * ua * kbuf,))
            prefetch_write(lt_f, (4 * ua,))
        if not routed or rem_r[np.uint64(ca)] <= 1:
            # The fields that starting, finishing or taking a task touch (routed: where a
            # task completes or may start).
            prefetch_write(tot_started, (r, ca))
            prefetch_write(tot_latency, (r, ca))
            prefetch_write(tot_completed, (r, ca))
            prefetch_write(tot_injected, (r, ca))
            prefetch_write(s_birth, (r, ca))
            prefetch_write(q_work, (0, r, ca))
            prefetch_write(q_birth, (0, r, ca))
            prefetch_write(q_birth, (1, r, ca))
    lead -= 1
    return ahead, lead


def _pe_setup(key_inject, q_len, thr, cols, is_traffic, routed, s_now, rc4, sent_now, offer_f, stealing, steal, r, c0,
              todo_bits):
    """The next PE with something to do: its index, its send and receive counts' slot, its queue,
    whether routed traffic offers it a packet, and (work_stealing) its steal state.
    """
    c = c0 + trailing_zeros(todo_bits)
    todo_bits &= todo_bits - np.uint64(1)
    u = r * cols + c
    i_now = s_now * rc4 + 4 * u  # the PE's send and receive counts (carried over above)
    qlen = np.int64(q_len[r, c])
    ql_start = qlen
    offer = is_traffic and offer_f[c] != 0 and (mix64(key_inject ^ (np.uint64(u) * G_UNIT)) >> S32) < \
        np.uint64(thr[r, c])
    # This cycle's sends: a routed PE counts them from here on, whether or not it sends (most
    # do, and whether one does is a coin flip to the branch predictor); elsewhere only
    # migration sends, and step 4 starts the count.
    if routed:
        _start_sends(sent_now)
    eject_now = 0  # layer_pipeline: packets delivered early this cycle (see below)
    stv = np.int64(steal[r, c]) if stealing else 0  # work_stealing's state (owed, asked)
    return c, todo_bits, u, i_now, qlen, ql_start, offer, eject_now, stv


def _receive(t, arrivals, q_work, q_birth, q_hops, tot_injected, tot_in, tot_pkt_offered, tot_pkt_delivered, lp_g,
             lp_reg, lp_got, cols, cap, bw, kbuf, qo, is_lp, routed, wrap, link_f, sent_f, recv_f, oq_f, oql_f, lt_f,
             per_link, qcap, b_lat, b_cred, injected, received, link_sent, link_received, pk_offered, pk_injected,
             pk_delivered, meas_injected, meas_hops, meas_delivered, meas_lat_sum, meas_lat_sq, meas_lat_max,
             ctl_received, sent_now, check_nb, stealing, r, c, u, i_now, qlen, eject_now, stv):
    """Step 1, receive and route: the waiting input ports in rotating priority, each up to its first
    message that cannot move; tasks join the queue, packets their output queue (or cut through).
    """
    # 1. Receive and route, rotating priority over input ports (the slow path only where
    # the row pass above found something waiting). A port stops at its first message that
    # cannot move.
    if arrivals[c] != 0 and (qlen < cap or routed or stealing):
        # Only the inputs with something waiting, in the rotating order from input t mod 4:
        # byte k of `waiting` is input (t + k) mod 4's byte of the arrivals word.
        a = np.uint64(arrivals[c])
        waiting = ((a | (a << np.uint64(32))) >> np.uint64(8 * (t & 3))) & U32
        while waiting != 0:
            k = _first_byte(waiting)
            waiting &= ~(U8 << np.uint64(8 * k))
            d = (t + k) & 3
            nu = _neighbour(u, d, cols)
            od = (d + 2) & 3
            lb = (4 * nu + od) * kbuf  # where the link's ring starts
            got = np.int64(recv_f[np.uint64(i_now + d)])
            avail = np.int64(sent_f[np.uint64(b_lat + 4 * nu + od)]) - got
            if avail < 0:
                avail += wrap
            take = 0
            for j in range(min(avail, bw)):
                i = got + j  # < 3K: got < 2K and j < avail <= K
                if i >= kbuf:
                    i -= kbuf
                    if i >= kbuf:
                        i -= kbuf
                m = link_f[np.uint64(lb + i)]
                if (m & PKT_FLAG) == 0:
                    if stealing:
                        if (m & U16) == 0:
                            # A control message: always taken. A request is owed an answer; a
                            # refusal ends the PE's request.
                            if m == MSG_REQUEST:
                                stv |= 1 << d
                            else:
                                stv &= 15
                            ctl_received += 1
                            take += 1
                            continue
                        if (stv >> 4) == d + 1:
                            if qlen >= cap:
                                break
                            stv &= 15  # the answer to the PE's request
                    if qlen >= cap:
                        break
                    qlen = _enqueue(q_work, q_birth, q_hops, qlen, r, c, _task_work(m), _task_birth(m),
                                    _task_hops(m))
                    tot_in[r, c] += 1
                    received += 1
                else:
                    # A packet goes to the output queue it needs (4: ejection) if it has room.
                    dest_r = np.int64((m >> np.uint64(44)) & U12)
                    dest_c = np.int64((m >> np.uint64(32)) & U12)
                    o = _xy_direction(r, c, dest_r, dest_c)
                    n_o = np.int64(oql_f[np.uint64(8 * u + o)])
                    # Packets cut through on o this cycle would still be in its queue until
                    # Send: they count towards its capacity (before Send, every send on o
                    # this cycle is a cut-through).
                    # Packets delivered early this cycle count towards the ejection queue likewise.
                    if n_o + (sent_now[np.uint64(o)] if o < 4 else 0) + \
                            (eject_now if o == 4 else 0) >= qo:
                        break
                    if is_lp and o == 4:
                        rn, cn = _next_pe(lp_reg, lp_g[r, c], r, c)
                        if rn >= 0:
                            # Multicast along the region's line: a copy for the next PE.
                            birth = np.int64(m & U32)
                            entered = _enter_router(oq_f, oql_f, qcap, link_f, lt_f, per_link, u, r, c,
                                                    cols, pack_packet(rn, cn, birth), rn, cn, sent_f,
                                                    i_now, sent_now, recv_f, b_cred, wrap, kbuf, bw, qo)
                            if entered == 0:
                                break
                            link_sent += entered == 2
                            pk_offered += 1
                            pk_injected += 1
                            tot_pkt_offered[r, c] += 1
                            meas_injected += 1
                            meas_hops += 1
                        g_here = lp_g[r, c]
                        got_now = np.int64(lp_got[r, c]) + 1
                        last_wavelet = got_now >= lp_reg[g_here, REG_WAVELETS]
                        if n_o == 0 and eject_now < bw and (qlen < cap or not last_wavelet) and \
                                not check_nb:
                            # Early delivery: the packet would be among the first the Send
                            # stage delivers, and nothing changes the task queue or the
                            # wavelet count before it (with migration off: else a task may
                            # still arrive on a later port).
                            if last_wavelet:
                                qlen = _enqueue(q_work, q_birth, q_hops, qlen, r, c,
                                                lp_reg[g_here, REG_WORK], t, 0)
                                injected += 1
                                tot_injected[r, c] += 1
                                lp_got[r, c] = 0
                            else:
                                lp_got[r, c] = got_now
                            pk_delivered += 1
                            tot_pkt_delivered[r, c] += 1
                            meas_delivered, meas_lat_sum, meas_lat_sq, meas_lat_max = _add_latency(
                                t - np.int64(m & U32), meas_delivered, meas_lat_sum, meas_lat_sq,
                                meas_lat_max)
                            eject_now += 1
                            take += 1
                            continue
                    if n_o == 0 and o < 4:
                        # Cut-through: into an empty queue whose link has room, the packet
                        # would be the first the Send stage sends; send it now instead.
                        if _has_room(o, _neighbour(u, o, cols), sent_f, i_now, sent_now, recv_f, b_cred,
                                     wrap, kbuf, bw):
                            _send(link_f, u, o, m, sent_f, i_now, sent_now, wrap, kbuf, lt_f, per_link)
                            link_sent += 1
                            take += 1
                            continue
                    oq_f[np.uint64((5 * u + o) * qcap + n_o)] = m
                    oql_f[np.uint64(8 * u + o)] = n_o + 1
                take += 1
            if take > 0:
                got += take
                if got >= wrap:
                    got -= wrap
                recv_f[np.uint64(i_now + d)] = got
                link_received += take
    return (injected, received, link_sent, link_received, pk_offered, pk_injected, pk_delivered, meas_injected,
            meas_hops, meas_delivered, meas_lat_sum, meas_lat_sq, meas_lat_max, ctl_received, qlen, eject_now, stv)


def _inject(t, seed, key_inject, key_dest, ev_unit, ev_work, ev_hi, took, q_work, q_birth, q_hops, tot_injected,
            tot_refused, thr, geo_log, src_pending, src_scan, tot_pkt_offered, lp_g, lp_reg, lp_taken, out_left,
            out_birth, lp_adm, rows, cols, cap, bw, kbuf, work_kind, work_fixed, work_min, work_max, is_trace,
            is_traffic, pattern, hot_thr, hot_r, hot_c, warmup, measure_end, qo, is_lp, wrap, work_span, link_f, sent_f,
            recv_f, oq_f, oql_f, lt_f, per_link, qcap, b_cred, injected, refused, link_sent, pk_offered, pk_injected,
            pk_in_source, meas_injected, meas_wait, meas_hops, ep, sent_now, r, c, u, i_now, qlen, offer):
    """Step 2, inject: what the workload offers the PE this cycle."""
    # 2. Inject.
    if is_traffic:
        link_sent, pk_offered, pk_injected, pk_in_source, meas_injected, meas_wait, meas_hops = _inject_traffic(
                t, seed, key_dest, thr, src_pending, src_scan, tot_pkt_offered, rows, cols, bw, kbuf,
                pattern, hot_thr, hot_r, hot_c, warmup, measure_end, qo, wrap, link_f, sent_f, recv_f, oq_f,
                oql_f, lt_f, per_link, qcap, b_cred, link_sent, pk_offered, pk_injected, pk_in_source,
                meas_injected, meas_wait, meas_hops, sent_now, r, c, u, i_now, offer)
    elif is_lp:
        injected, link_sent, pk_injected, meas_injected, meas_wait, meas_hops, qlen = _inject_pipeline(
                t, took, q_work, q_birth, q_hops, tot_injected, lp_g, lp_reg, lp_taken, out_left, out_birth,
                lp_adm, cols, cap, bw, kbuf, qo, wrap, link_f, sent_f, recv_f, oq_f, oql_f, lt_f, per_link,
                qcap, b_cred, injected, link_sent, pk_injected, meas_injected, meas_wait, meas_hops,
                sent_now, r, c, u, i_now, qlen)
    elif is_trace:
        injected, refused, ep, qlen = _inject_trace(t, ev_unit, ev_work, ev_hi, q_work, q_birth, q_hops,
                                                    tot_injected, tot_refused, cap, injected, refused, ep,
                                                    r, c, u, qlen)
    else:
        injected, refused, qlen = _inject_bernoulli(t, key_inject, q_work, q_birth, q_hops, tot_injected,
                                                    tot_refused, thr, geo_log, cap, work_kind, work_fixed,
                                                    work_min, work_max, work_span, injected, refused, r, c,
                                                    u, qlen)
    return (injected, refused, link_sent, pk_offered, pk_injected, pk_in_source, meas_injected, meas_wait, meas_hops,
            ep, qlen)


def _inject_traffic(t, seed, key_dest, thr, src_pending, src_scan, tot_pkt_offered, rows, cols, bw, kbuf, pattern,
                    hot_thr, hot_r, hot_c, warmup, measure_end, qo, wrap, link_f, sent_f, recv_f, oq_f, oql_f, lt_f,
                    per_link, qcap, b_cred, link_sent, pk_offered, pk_injected, pk_in_source, meas_injected, meas_wait,
                    meas_hops, sent_now, r, c, u, i_now, offer):
    """traffic: a packet offered joins the source queue; the head packets enter the router while
    it has room.
    """
    pending = np.int64(src_pending[r, c])
    if offer:
        dest_r, dest_c = packet_destination(mix64(key_dest ^ (np.uint64(u) * G_UNIT)), r, c, rows, cols,
                                            pattern, hot_thr, hot_r, hot_c)
        if dest_r >= 0:
            if pending == 0:
                src_scan[r, c] = t  # the head is this packet
            pending += 1
            pk_offered += 1
            tot_pkt_offered[r, c] += 1
    sent_from_source = 0
    while pending > 0 and sent_from_source < bw:
        # The head: the first packet born at or after src_scan (found again from draws).
        tb = np.int64(src_scan[r, c])
        while True:
            dest_r, dest_c = _offered_packet(seed, tb, u, r, c, thr[r, c], rows, cols, pattern, hot_thr,
                                             hot_r, hot_c)
            if dest_r >= 0:
                break
            tb += 1
        src_scan[r, c] = tb
        entered = _enter_router(oq_f, oql_f, qcap, link_f, lt_f, per_link, u, r, c, cols,
                                pack_packet(dest_r, dest_c, tb), dest_r, dest_c, sent_f, i_now,
                                sent_now, recv_f, b_cred, wrap, kbuf, bw, qo)
        if entered == 0:
            break
        link_sent += entered == 2
        pending -= 1
        pk_injected += 1
        sent_from_source += 1
        if warmup <= tb < measure_end:
            meas_injected += 1
            meas_wait += t - tb
            meas_hops += abs(dest_r - r) + abs(dest_c - c)
        src_scan[r, c] = tb + 1
    src_pending[r, c] = pending
    pk_in_source += pending
    return link_sent, pk_offered, pk_injected, pk_in_source, meas_injected, meas_wait, meas_hops


def _inject_pipeline(t, took, q_work, q_birth, q_hops, tot_injected, lp_g, lp_reg, lp_taken, out_left, out_birth,
                     lp_adm, cols, cap, bw, kbuf, qo, wrap, link_f, sent_f, recv_f, oq_f, oql_f, lt_f, per_link, qcap,
                     b_cred, injected, link_sent, pk_injected, meas_injected, meas_wait, meas_hops, sent_now, r, c, u,
                     i_now, qlen):
    """layer_pipeline: a first region takes the chunks admitted to its replica; an output stage
    sends its packets to the successor's inputs.
    """
    g = np.int64(lp_g[r, c])
    if g >= 0:
        # A first region takes the chunks admitted to its replica while its queue has room.
        if lp_reg[g, REG_FIRST] == 1:
            adm = lp_adm[lp_reg[g, REG_REPLICA]]
            taken = np.int64(lp_taken[r, c])
            while taken < adm and qlen < cap:
                qlen = _enqueue(q_work, q_birth, q_hops, qlen, r, c, lp_reg[g, REG_WORK], t, 0)
                taken += 1
                injected += 1
                tot_injected[r, c] += 1
            if taken == adm and taken > lp_taken[r, c]:
                took[lp_reg[g, REG_REPLICA]] += 1
            lp_taken[r, c] = taken
        # The output stage (output index k): packets for inputs k, k + n_out, ... of the successor.
        left = np.int64(out_left[r, c])
        if left > 0:
            nxt = lp_reg[g, REG_NEXT]
            k = _out_index(lp_reg, g, r, c)
            n_out = _n_out(lp_reg, g)
            wv = lp_reg[nxt, REG_WAVELETS]
            n_stage = _feeds(k, n_out, _n_in(lp_reg, nxt)) * wv
            ob = np.int64(out_birth[r, c])
            sent_from_stage = 0
            while left > 0 and sent_from_stage < bw:
                # All of one input's wavelets, then the next input's.
                dest_r, dest_c = _input_pe(lp_reg, nxt, k + ((n_stage - left) // wv) * n_out)
                entered = _enter_router(oq_f, oql_f, qcap, link_f, lt_f, per_link, u, r, c, cols,
                                        pack_packet(dest_r, dest_c, ob), dest_r, dest_c, sent_f, i_now,
                                        sent_now, recv_f, b_cred, wrap, kbuf, bw, qo)
                if entered == 0:
                    break
                link_sent += entered == 2
                left -= 1
                sent_from_stage += 1
                pk_injected += 1
                meas_injected += 1
                meas_wait += t - ob
                meas_hops += abs(dest_r - r) + abs(dest_c - c)
            out_left[r, c] = left
    return injected, link_sent, pk_injected, meas_injected, meas_wait, meas_hops, qlen


def _inject_trace(t, ev_unit, ev_work, ev_hi, q_work, q_birth, q_hops, tot_injected, tot_refused, cap, injected,
                  refused, ep, r, c, u, qlen):
    """Trace files: the PE's events this cycle, each a task (refused when the queue is full)."""
    while ep < ev_hi and ev_unit[ep] == u:
        injected += 1
        tot_injected[r, c] += 1
        if qlen < cap:
            qlen = _enqueue(q_work, q_birth, q_hops, qlen, r, c, ev_work[ep], t, 0)
        else:
            refused += 1
            tot_refused[r, c] += 1
        ep += 1
    return injected, refused, ep, qlen


def _inject_bernoulli(t, key_inject, q_work, q_birth, q_hops, tot_injected, tot_refused, thr, geo_log, cap, work_kind,
                      work_fixed, work_min, work_max, work_span, injected, refused, r, c, u, qlen):
    """The task path: a Bernoulli offer at the PE's rate, with its work drawn from the work
    distribution (refused when the queue is full).
    """
    uk = key_inject ^ (np.uint64(u) * G_UNIT)
    h = mix64(uk)
    if (h >> S32) < np.uint64(thr[r, c]):
        injected += 1
        tot_injected[r, c] += 1
        if qlen < cap:
            if work_kind == WORK_FIXED:
                w = work_fixed
            else:
                h1 = mix64(uk ^ G_INDEX)
                if work_kind == WORK_UNIFORM:
                    w = work_min + np.int64(h1 % work_span)
                elif work_fixed == 1:
                    w = 1
                else:
                    g = math.floor(math.log(unit_interval_open0(h1)) / geo_log)
                    # w = 1 + floor(log(U) / log(1 - 1/m)), capped.
                    if g >= work_max - 1:
                        w = work_max
                    else:
                        w = 1 + np.int64(g)
            qlen = _enqueue(q_work, q_birth, q_hops, qlen, r, c, w, t, 0)
        else:
            refused += 1
            tot_refused[r, c] += 1
    return injected, refused, qlen


def _send_stage(t, lhist, q_work, q_birth, q_hops, tot_injected, tot_pkt_delivered, oq_len64, lp_g, lp_reg, lp_got,
                cols, cap, bw, kbuf, is_traffic, warmup, measure_end, is_lp, routed, wrap, n_bins, link_f, sent_f,
                recv_f, oq_f, oql_f, lt_f, per_link, qcap, b_cred, injected, link_sent, pk_delivered, pk_in_router,
                meas_delivered, meas_lat_sum, meas_lat_sq, meas_lat_max, sent_now, r, c, u, i_now, qlen, eject_now):
    """Send: each output queue's head packets go out while their link has room; up to B packets
    leave the ejection queue (layer_pipeline: the last wavelet of a chunk makes its task).
    """
    # Send: each output queue's head packets go out while their link has room; up to B
    # packets leave the ejection queue. (oq_len64 holds the five lengths in one word.)
    if routed and oq_len64[r, c] != 0:
        # Only the output queues that hold packets (bytes 0-3 of the lengths word).
        busy_out = oq_len64[r, c] & U32
        while busy_out != 0:
            o = _first_byte(busy_out)
            busy_out &= ~(U8 << np.uint64(8 * o))
            while oql_f[np.uint64(8 * u + o)] > 0:
                if not _has_room(o, _neighbour(u, o, cols), sent_f, i_now, sent_now, recv_f, b_cred, wrap,
                                 kbuf, bw):
                    break
                _send(link_f, u, o, oq_f[np.uint64((5 * u + o) * qcap)], sent_f, i_now, sent_now, wrap,
                      kbuf, lt_f, per_link)
                link_sent += 1
                _pop_front(oq_f, oql_f, u, o, qcap)
        for _ in range(bw - eject_now):
            if oql_f[np.uint64(8 * u + 4)] == 0:
                break
            m = oq_f[np.uint64((5 * u + 4) * qcap)]
            if is_lp:
                # Each packet is a wavelet of the PE's current chunk; the last makes its
                # task, if the queue has room.
                g_here = lp_g[r, c]
                got_now = np.int64(lp_got[r, c]) + 1
                if got_now >= lp_reg[g_here, REG_WAVELETS]:
                    if qlen >= cap:
                        break
                    qlen = _enqueue(q_work, q_birth, q_hops, qlen, r, c, lp_reg[g_here, REG_WORK], t, 0)
                    injected += 1
                    tot_injected[r, c] += 1
                    lp_got[r, c] = 0
                else:
                    lp_got[r, c] = got_now
            birth = np.int64(m & U32)
            _pop_front(oq_f, oql_f, u, 4, qcap)
            pk_delivered += 1
            tot_pkt_delivered[r, c] += 1
            if warmup <= birth < measure_end:
                lat = t - birth
                meas_delivered, meas_lat_sum, meas_lat_sq, meas_lat_max = _add_latency(
                    lat, meas_delivered, meas_lat_sum, meas_lat_sq, meas_lat_max)
                if is_traffic:  # (layer_pipeline: the histogram is of task latencies)
                    lhist[min(lat, n_bins - 1)] += 1
        # The sum of the five length bytes (each <= 48, so the sum fits in the top byte);
        # queues that were empty before Send are still empty.
        pk_in_router += np.int64((oq_len64[r, c] * BYTE_SUM) >> np.uint64(56))
    return (injected, link_sent, pk_delivered, pk_in_router, meas_delivered, meas_lat_sum, meas_lat_sq, meas_lat_max,
            qlen)


def _start(q_work, q_birth, q_hops, s_rem, s_birth, s_hops, tot_started, out_left, is_lp, r, c, qlen):
    """Step 3, start service: the head task moves into the server (layer_pipeline: only once the last
    output has left).
    """
    # 3. Start service (layer_pipeline: only once the last output has left).
    rem = np.int64(s_rem[r, c])
    if rem == 0 and qlen > 0 and (is_lp == 0 or out_left[r, c] == 0):
        rem = np.int64(q_work[0, r, c])
        # Busy cycles are derived: work started minus work remaining (no per-cycle update).
        tot_started[r, c] += rem
        s_birth[r, c] = q_birth[0, r, c]
        s_hops[r, c] = q_hops[0, r, c]
        qlen -= 1
        # The head stays at slot 0 and the rest move up: queues are short on average, and
        # keeping tasks in the low slots keeps the memory the kernel touches small.
        for i in range(qlen):
            q_work[i, r, c] = q_work[i + 1, r, c]
            q_birth[i, r, c] = q_birth[i + 1, r, c]
            q_hops[i, r, c] = q_hops[i + 1, r, c]
    return rem, qlen


def _migrate(key_migrate, q_work, q_birth, q_hops, depth_h, tot_out, lp_g, lp_reg, rows, cols, bw, kbuf, policy,
             threshold, max_mig, is_lp, routed, wrap, s_info, link_f, sent_f, recv_f, lt_f, per_link, b_cred, migrated,
             link_sent, ctl_sent, sent_now, known, elig, mig_now, quota, kp, p_min, hyst, stop, shed, mig_dir,
             count_dirs, diffusion, gradient, press_h, alpha, stealing, steal, r, c, rem, u, i_now, qlen, stv):
    """Step 4, migrate: the shedding flag, then the policy's step (work_stealing answers and asks; the
    others push from the tail).
    """
    # 4. Migrate from the tail to a neighbour known to be less loaded. Messages sent in steps
    # 1-2 count towards the bandwidth and credits but not towards the known depth.
    # (With hysteresis, the shedding flag first: set above the threshold, cleared at or below
    # `stop`, and the limit is `stop` while it is set.)
    limit = threshold
    on = np.int64(0)
    mine = is_lp and policy != POLICY_NONE and _migrates(lp_g, lp_reg, r, c)
    if hyst > 0:
        on = np.int64(qlen > threshold) | (np.int64(shed[r, c]) & np.int64(qlen > stop))
        limit = threshold - hyst * on
    if stealing:
        migrated, link_sent, ctl_sent, qlen, stv = _work_stealing_step(
                key_migrate, q_work, q_birth, q_hops, tot_out, lp_g, lp_reg, rows, cols, bw, kbuf, max_mig,
                is_lp, routed, wrap, link_f, sent_f, recv_f, lt_f, per_link, b_cred, migrated, link_sent,
                ctl_sent, sent_now, elig, mig_dir, count_dirs, steal, r, c, rem, u, i_now, qlen, stv, limit,
                mine)
    elif policy != POLICY_NONE and qlen > limit:
        migrated, link_sent, qlen = _push(key_migrate, q_work, q_birth, q_hops, depth_h, tot_out, lp_g,
                                          lp_reg, rows, cols, bw, kbuf, policy, max_mig, is_lp, routed,
                                          wrap, s_info, link_f, sent_f, recv_f, lt_f, per_link, b_cred,
                                          migrated, link_sent, sent_now, known, elig, mig_now, quota, kp,
                                          p_min, mig_dir, count_dirs, diffusion, gradient, press_h, alpha,
                                          r, c, u, i_now, qlen, limit, mine)
    if hyst > 0:
        shed[r, c] = np.uint8(on & np.int64(qlen > stop))
    return migrated, link_sent, ctl_sent, qlen, stv


def _work(t, lhist, done_ev, s_rem, s_birth, s_hops, tot_completed, tot_latency, tot_pkt_offered, lp_g, lp_reg,
          out_left, out_birth, is_traffic, is_lp, n_rep, n_bins, busy, in_service, completed, lat_sum, lat_sq, hops_sum,
          lat_max, pk_offered, r, c, rem):
    """Step 5, work: the task in service advances one cycle; one that completes records its latency
    (layer_pipeline: its output stage starts, or the chunk is done).
    """
    # 5. Work. Written without a branch on "busy", which is a coin flip at moderate load.
    b = np.int64(rem > 0)
    busy += b
    rem -= b
    if b == 1 and rem == 0:
        lat = t + 1 - np.int64(s_birth[r, c])
        completed += 1
        tot_completed[r, c] += 1
        tot_latency[r, c] += lat
        lat_sum += lat
        lat_sq += lat * lat
        hops_sum += s_hops[r, c]
        if lat > lat_max:
            lat_max = lat
        if is_traffic == 0:
            if lat >= n_bins - 1:
                lhist[n_bins - 1] += 1
            else:
                lhist[lat] += 1
        g = np.int64(lp_g[r, c]) if is_lp else -1
        k = _out_index(lp_reg, g, r, c) if g >= 0 else -1
        if k >= 0:
            nxt = lp_reg[g, REG_NEXT]
            if nxt >= 0:
                fan = _feeds(k, _n_out(lp_reg, g), _n_in(lp_reg, nxt)) * lp_reg[nxt, REG_WAVELETS]
                out_left[r, c] = fan
                out_birth[r, c] = t + 1
                pk_offered += fan
                tot_pkt_offered[r, c] += fan
            else:
                n_ev = done_ev[0] + 1
                done_ev[n_ev] = (np.int64(tot_completed[r, c]) - 1) * n_rep + lp_reg[g, REG_REPLICA]
                done_ev[0] = n_ev
    in_service += np.int64(rem > 0)
    s_rem[r, c] = rem
    return busy, in_service, completed, lat_sum, lat_sq, hops_sum, lat_max, pk_offered, rem


def _end_of_cycle(dhist, q_len, depth_h, s_now, queued, p_min, stop, gradient, r, p_now, c, q_moved, qlen, ql_start):
    """Step 6, end of cycle: the PE's own state and the values others may read later."""
    # 6. End of cycle: own state and the values others may read later.
    q_len[r, c] = qlen
    queued += _record_depth(depth_h, dhist, s_now, r, c, qlen)
    if gradient:
        p_now[c] = np.uint8(0) if qlen <= stop else np.uint8(min(np.int64(p_min[c]) + 1, PRESSURE_NONE))
    q_moved |= qlen != ql_start
    return queued, q_moved


def _add_counters(acc, busy, queued, in_service, injected, refused, completed, migrated, received, lat_sum, lat_sq,
                  hops_sum, lat_max, link_sent, link_received, pk_offered, pk_injected, pk_delivered, pk_in_source,
                  pk_in_router, meas_injected, meas_wait, meas_hops, meas_delivered, meas_lat_sum, meas_lat_sq,
                  meas_lat_max, ctl_sent, ctl_received):
    """Add the block's observables into acc."""
    acc[S_BUSY] += busy
    acc[S_QUEUED] += queued
    acc[S_IN_SERVICE] += in_service
    acc[S_INJECTED] += injected
    acc[S_REFUSED] += refused
    acc[S_COMPLETED] += completed
    acc[S_MIGRATED] += migrated
    acc[S_RECEIVED] += received
    acc[S_LATENCY_SUM] += lat_sum
    acc[S_LATENCY_SQ_SUM] += lat_sq
    acc[S_HOPS_SUM] += hops_sum
    acc[S_LATENCY_MAX] = lat_max
    acc[S_LINK_SENT] += link_sent
    acc[S_LINK_RECEIVED] += link_received
    acc[S_PKT_OFFERED] += pk_offered
    acc[S_PKT_INJECTED] += pk_injected
    acc[S_PKT_DELIVERED] += pk_delivered
    acc[S_PKT_IN_SOURCE] += pk_in_source
    acc[S_PKT_IN_ROUTER] += pk_in_router
    acc[S_MEAS_INJECTED] += meas_injected
    acc[S_MEAS_SOURCE_WAIT_SUM] += meas_wait
    acc[S_MEAS_HOPS_SUM] += meas_hops
    acc[S_MEAS_DELIVERED] += meas_delivered
    acc[S_MEAS_LATENCY_SUM] += meas_lat_sum
    acc[S_MEAS_LATENCY_SQ_SUM] += meas_lat_sq
    acc[S_MEAS_LATENCY_MAX] = meas_lat_max
    acc[S_CONTROL_SENT] += ctl_sent
    acc[S_CONTROL_RECEIVED] += ctl_received
