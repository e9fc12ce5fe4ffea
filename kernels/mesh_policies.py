"""The migration policies' own parts of the mesh's cycle (docs/mesh.md, "Migration", step 4), each a
step spliced into `kernels.mesh._step_rows` by `python -m kernels.splice` (docs/design.md,
"Spliced kernels"). The table of policies is meshsim/mesh/policies.py; the oracle's rules are
`MIGRATION_RULES` in kernels/reference/mesh_ref.py.

Like kernels/mesh_steps.py, this module is source for the splice: its names beyond each step's
parameters are kernels/mesh.py's.
"""


def _gradient_minima(lp_g, lp_reg, rows, cols, is_lp, s_info, nb_min, p_min, press_h, r, p_up, p_down, p_same, um, dm,
                     c0, c1, a0, a1):
    """gradient, vector pass: each PE's least pressure of a neighbour as known at t - D, and whether
    a light PE is known at all (docs/mesh.md, "Migration", gradient).
    """
    # The least pressure of a neighbour as known at t - D (255 where there is none).
    for c in range(a0, a1):
        p_min[c] = min(p_up[c] | um, p_down[c] | dm)
    for c in range(max(a0, np.uint64(1)), a1):
        p_min[c] = min(p_min[c], p_same[c - np.uint64(1)])
    for c in range(a0, min(a1, np.uint64(cols - 1))):
        p_min[c] = min(p_min[c], p_same[c + np.uint64(1)])
    if is_lp:
        # In a pipeline, over the migration neighbours only (255 where there are none).
        for c in range(c0, c1):
            pm = PRESSURE_NONE
            if _migrates(lp_g, lp_reg, r, c):
                for d in range(4):
                    nr = r + (d == 2) - (d == 0)
                    nc = c + (d == 1) - (d == 3)
                    if 0 <= nr < rows and 0 <= nc < cols and \
                            _migration_neighbour(lp_g, lp_reg, r, c, nr, nc):
                        pm = min(pm, np.int64(press_h[s_info, nr, nc]))
            p_min[c] = np.uint8(pm)
    # Where no light PE is known, step 4 finds no direction: 255 (>= any queue) in nb_min
    # says so to the test below, 0 that a queue above `stop` may move.
    for c in range(a0, a1):
        nb_min[c] = np.uint8(0xFF) if p_min[c] == PRESSURE_NONE else np.uint8(0)


def _work_stealing_offers(lp_g, lp_reg, is_lp, offer_f, r, rem_r, stl_r, c0, c1):
    """work_stealing, vector pass: a PE that owes an answer, or is idle or about to be with no
    request outstanding, has step 4 to do.
    """
    # A PE that owes an answer, or is idle or about to be with no request outstanding, has
    # step 4 to do.
    # (A pipeline PE that takes no part in migration never asks, nor is asked.)
    for c in range(c0, c1):
        if not is_lp or _migrates(lp_g, lp_reg, r, c):
            sv = stl_r[c]
            offer_f[c] |= np.uint8((sv & np.uint8(15)) != 0) | (np.uint8(sv < 16) & np.uint8(rem_r[c] <= 1))


def _work_stealing_step(key_migrate, q_work, q_birth, q_hops, tot_out, lp_g, lp_reg, rows, cols, bw, kbuf, max_mig,
                        is_lp, routed, wrap, link_f, sent_f, recv_f, lt_f, per_link, b_cred, migrated, link_sent,
                        ctl_sent, sent_now, elig, mig_dir, count_dirs, steal, r, c, rem, u, i_now, qlen, stv, limit,
                        mine):
    """work_stealing, step 4: answer the requests owed (a task, or a refusal), then, idle with no
    request outstanding, ask a neighbour at random.
    """
    if stv != 0 or qlen + rem == 0:
        if not routed:
            _start_sends(sent_now)
        # Answer the requests owed, in increasing d: a task while the queue is above the
        # limit (at most M), else a refusal; one whose link has no room waits.
        n_sent = 0
        for d in range(4):
            if (stv >> d) & 1 == 0:
                continue
            if not _has_room(d, _neighbour(u, d, cols), sent_f, i_now, sent_now, recv_f, b_cred,
                             wrap, kbuf, bw):
                continue
            if qlen > limit:
                if n_sent >= max_mig:
                    continue
                _send_tail(q_work, q_birth, q_hops, qlen, r, c, link_f, u, d, sent_f, i_now,
                           sent_now, wrap, kbuf, lt_f, per_link)
                qlen -= 1
                n_sent += 1
                migrated += 1
                tot_out[r, c] += 1
                if count_dirs:
                    mig_dir[r, c, d] += 1
            else:
                _send(link_f, u, d, MSG_REFUSAL, sent_f, i_now, sent_now, wrap, kbuf, lt_f, per_link)
                ctl_sent += 1
            link_sent += 1
            stv &= ~(1 << d)
        # Ask: an idle PE with no request outstanding asks a neighbour at random.
        if qlen + rem == 0 and stv < 16:
            n_elig = 0
            for d in range(4):
                nr = r + (d == 2) - (d == 0)
                nc = c + (d == 1) - (d == 3)
                if nr < 0 or nr >= rows or nc < 0 or nc >= cols:
                    continue
                if is_lp and not (mine and _migration_neighbour(lp_g, lp_reg, r, c, nr, nc)):
                    continue
                if _has_room(d, _neighbour(u, d, cols), sent_f, i_now, sent_now, recv_f, b_cred,
                             wrap, kbuf, bw):
                    elig[n_elig] = d
                    n_elig += 1
            if n_elig > 0:
                hm = mix64(key_migrate ^ (np.uint64(u) * G_UNIT) ^ (np.uint64(DRAW_STEALING) * G_INDEX))
                d = elig[np.int64(((hm >> S32) * np.uint64(n_elig)) >> S32)]
                _send(link_f, u, d, MSG_REQUEST, sent_f, i_now, sent_now, wrap, kbuf, lt_f, per_link)
                ctl_sent += 1
                link_sent += 1
                stv |= (d + 1) << 4
    steal[r, c] = np.uint8(stv)
    return migrated, link_sent, ctl_sent, qlen, stv


def _push(key_migrate, q_work, q_birth, q_hops, depth_h, tot_out, lp_g, lp_reg, rows, cols, bw, kbuf, policy, max_mig,
          is_lp, routed, wrap, s_info, link_f, sent_f, recv_f, lt_f, per_link, b_cred, migrated, link_sent, sent_now,
          known, elig, mig_now, quota, kp, p_min, mig_dir, count_dirs, diffusion, gradient, press_h, alpha, r, c, u,
          i_now, qlen, limit, mine):
    """The pushing policies' step 4: tasks from the tail to the neighbours that the policy's rule
    picks (least_loaded, random_lower, diffusion, gradient), at most M, while the queue is above the
    limit.
    """
    if not routed:
        _start_sends(sent_now)  # (a routed PE started its count above)
    for d in range(4):
        mig_now[d] = 0
        quota[d] = 255
        nr = r + (d == 2) - (d == 0)
        nc = c + (d == 1) - (d == 3)
        if nr < 0 or nr >= rows or nc < 0 or nc >= cols or \
                (is_lp and not (mine and _migration_neighbour(lp_g, lp_reg, r, c, nr, nc))):
            known[d] = -1
        else:
            known[d] = depth_h[s_info, nr, nc]
            if gradient:
                kp[d] = press_h[s_info, nr, nc]
            if diffusion:
                _diffusion_quota(key_migrate, known, quota, alpha, d, u, qlen)
    for k in range(max_mig):
        if qlen <= limit:
            break
        n_elig = 0
        best = -1
        for d in range(4):
            if known[d] < 0 or mig_now[d] >= quota[d]:
                continue
            if gradient:
                # Down the surface: towards the least pressure known, if a light PE is.
                if kp[d] != p_min[c] or kp[d] == PRESSURE_NONE:
                    continue
            elif known[d] + mig_now[d] + 1 >= qlen:
                continue
            if not _has_room(d, _neighbour(u, d, cols), sent_f, i_now, sent_now, recv_f, b_cred, wrap,
                             kbuf, bw):
                continue  # (known[d] >= 0: the neighbour exists)
            elig[n_elig] = d
            n_elig += 1
            if best < 0 or known[d] + mig_now[d] < known[best] + mig_now[best]:
                best = d
        if n_elig == 0:
            break
        if policy == POLICY_RANDOM_LOWER:
            best = _random_lower_pick(key_migrate, elig, k, u, n_elig)
        _send_tail(q_work, q_birth, q_hops, qlen, r, c, link_f, u, best, sent_f, i_now, sent_now,
                   wrap, kbuf, lt_f, per_link)
        link_sent += 1
        qlen -= 1
        mig_now[best] += 1
        migrated += 1
        tot_out[r, c] += 1
        if count_dirs:
            mig_dir[r, c, best] += 1
    return migrated, link_sent, qlen


def _diffusion_quota(key_migrate, known, quota, alpha, d, u, qlen):
    """diffusion: direction d's quota, floor(alpha x (depth - known) + U), U uniform in [0, 1)
    from the migration stream.
    """
    # floor(alpha x (depth - known) + U), U uniform in [0, 1) from the
    # migration stream: the expected quota is alpha x the difference.
    hq = mix64(key_migrate ^ (np.uint64(u) * G_UNIT) ^
               (np.uint64(DRAW_DIFFUSION + d) * G_INDEX))
    quota[d] = (alpha * max(qlen - known[d], 0) + np.int64(hq >> np.uint64(48))) >> 16


def _random_lower_pick(key_migrate, elig, k, u, n_elig):
    """random_lower: the direction drawn among the eligible ones."""
    hm = mix64(key_migrate ^ (np.uint64(u) * G_UNIT) ^
               (np.uint64(DRAW_RANDOM_LOWER + k) * G_INDEX))
    best = elig[np.int64(((hm >> S32) * np.uint64(n_elig)) >> S32)]
    return best
