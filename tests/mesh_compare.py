"""Helpers shared by the kernel tests: build a small scenario, run it through the fast kernel and
the plain reference side by side, and put the kernel's state in the reference's canonical form."""

from __future__ import annotations

import numpy as np

from kernels import mesh as K
from kernels.reference.mesh_ref import MeshReference, rate_map
from meshsim.mesh.sim import CFG_FIELDS, MeshSim, build_inputs
from meshsim.mesh.state import busy_cycles
from meshsim.scenario import scenario_from_dict

SERIES_KEYS = {"busy": K.S_BUSY, "queued": K.S_QUEUED, "in_service": K.S_IN_SERVICE, "injected": K.S_INJECTED,
               "refused": K.S_REFUSED, "completed": K.S_COMPLETED, "migrated": K.S_MIGRATED,
               "received": K.S_RECEIVED, "in_flight": K.S_IN_FLIGHT, "latency_sum": K.S_LATENCY_SUM,
               "latency_sq_sum": K.S_LATENCY_SQ_SUM, "hops_sum": K.S_HOPS_SUM, "latency_max": K.S_LATENCY_MAX,
               "packets_offered": K.S_PKT_OFFERED, "packets_injected": K.S_PKT_INJECTED,
               "packets_delivered": K.S_PKT_DELIVERED, "packets_in_source": K.S_PKT_IN_SOURCE,
               "measured_delivered": K.S_MEAS_DELIVERED, "measured_latency_sum": K.S_MEAS_LATENCY_SUM,
               "measured_latency_sq_sum": K.S_MEAS_LATENCY_SQ_SUM, "measured_latency_max": K.S_MEAS_LATENCY_MAX,
               "packets_in_router": K.S_PKT_IN_ROUTER, "measured_injected": K.S_MEAS_INJECTED,
               "measured_source_wait_sum": K.S_MEAS_SOURCE_WAIT_SUM, "measured_hops_sum": K.S_MEAS_HOPS_SUM,
               "chunks_finished": K.S_CHUNKS_FINISHED, "chunk_latency_sum": K.S_CHUNK_LATENCY_SUM,
               "weight_wait": K.S_WEIGHT_WAIT, "control_sent": K.S_CONTROL_SENT,
               "control_received": K.S_CONTROL_RECEIVED}


def small_scenario(rows, cols, *, workload="uniform", trace_file=None, path=None, **over):
    """A scenario dict for a small grid, heavily loaded so that queues fill and migration works."""
    d = {
        "run": {"cycles": 200, "seed": 7},
        "machine": {"rows": rows, "cols": cols, "queue_capacity": 6},
        "migration": {"policy": "least_loaded", "threshold": 1},
        "workload": {"type": workload},
        "output": {"frame_every_cycles": 0},
    }
    if workload == "traffic":
        d["workload"].update(injection_rate=0.2, warmup_cycles=10, measure_cycles=60)
        d["migration"]["policy"] = "none"
    elif workload != "trace":
        d["workload"]["injection_rate"] = 0.2
        if "workload__work_distribution" not in over:
            d["workload"].update(work_distribution="uniform", work_min_cycles=1, work_max_cycles=9)
    else:
        d["workload"]["trace_file"] = trace_file
    for key, value in over.items():
        section, name = key.split("__")
        d.setdefault(section, {})[name] = value
    return scenario_from_dict(d, path=path)


def reference_for(sc, trace_events=None) -> MeshReference:
    """The plain reference for a scenario, its rate map built by the reference's own code."""
    m, mig, wl = sc.values["machine"], sc.values["migration"], sc.values["workload"]
    rates = None
    traffic = {}
    pipeline = None
    if wl["type"] == "layer_pipeline":
        pipe = build_inputs(sc).pipeline
        pipeline = pipeline_for_reference(pipe)
        if pipe.streaming:
            pipeline["streaming"] = {"chunks_per_pass": pipe.chunks_per_pass, "load_cycles": pipe.load_cycles}
        traffic = dict(router_queue_packets=m["router_queue_packets"], pipeline=pipeline)
    elif wl["type"] == "traffic":
        traffic = dict(pattern=wl["pattern"], hot_fraction=wl["hot_fraction"], warmup_cycles=wl["warmup_cycles"],
                       measure_cycles=wl["measure_cycles"], router_queue_packets=m["router_queue_packets"])
        rates = [wl["injection_rate"]] * (m["rows"] * m["cols"])
    elif wl["type"] not in ("trace", "layer_pipeline"):
        rates = rate_map(m["rows"], m["cols"], wl["type"], wl["injection_rate"], hot_rate=wl["hot_rate"],
                         hot_regions=sc.hot_regions(), sigma=wl["sigma"], seed=sc.get("run", "seed"))
    return MeshReference(
        rows=m["rows"], cols=m["cols"], queue_capacity=m["queue_capacity"],
        hop_latency_cycles=m["hop_latency_cycles"], link_messages_per_cycle=m["link_messages_per_cycle"],
        link_buffer_messages=m["link_buffer_messages"], credit_delay_cycles=m["credit_delay_cycles"],
        policy=mig["policy"], threshold=mig["threshold"], info_delay_cycles=mig["info_delay_cycles"],
        max_per_cycle=mig["max_per_cycle"], hysteresis=mig["hysteresis"] if mig["policy"] != "none" else 0,
        diffusion_rate=mig["diffusion_rate"],
        seed=sc.get("run", "seed"), rates=rates,
        work_distribution=wl["work_distribution"], work_cycles=wl["work_cycles"],
        work_min_cycles=wl["work_min_cycles"], work_max_cycles=wl["work_max_cycles"], trace_events=trace_events,
        **traffic)


def pipeline_for_reference(pipe) -> dict:
    """The reference's form of a pipeline's region table."""
    regions = []
    for row in pipe.table.tolist():
        r0, c0, w, h = row[K.REG_ROW0], row[K.REG_COL0], row[K.REG_WIDTH], row[K.REG_HEIGHT]
        regions.append(dict(row0=r0, col0=c0, row1=r0 + h, col1=c0 + w, work=row[K.REG_WORK], next=row[K.REG_NEXT],
                            replica=row[K.REG_REPLICA], flow=row[K.REG_FLOW],
                            input="col" if row[K.REG_INPUT] == K.INPUT_COL else "row",
                            output="bottom" if row[K.REG_OUTPUT] == K.OUTPUT_BOTTOM else "side",
                            wavelets=row[K.REG_WAVELETS]))
    return {"regions": regions, "chunks_in_flight": pipe.chunks_in_flight}


def _pipeline_snapshot(sim: MeshSim, source: list) -> dict:
    """The kernel's layer_pipeline state in the reference's form; fills `source` with the output
    stages' packets."""
    st = sim.state
    reg = st.lp_reg
    rows, cols = sim.inputs.rows, sim.inputs.cols
    w = sim.inputs.pipeline.chunks_in_flight
    for r in range(rows):
        for c in range(cols):
            left = int(st.out_left[r, c])
            if left == 0:
                continue
            g = int(st.lp_g[r, c])
            nxt = int(reg[g, K.REG_NEXT])
            k = int(K._out_index(lp_reg=reg, g=g, r=r, c=c))
            n_out = int(K._n_out(reg, g))
            wv = int(reg[nxt, K.REG_WAVELETS])
            n_stage = int(K._feeds(k, n_out, K._n_in(reg, nxt))) * wv
            for m in range(n_stage - left, n_stage):
                dr, dc = K._input_pe(reg, nxt, k + (m // wv) * n_out)
                source[r * cols + c].append((int(dr), int(dc), int(st.out_birth[r, c])))
    pending = []
    for p in range(st.lp_adm.shape[0]):
        pending.append([(c, int(st.lp_admit_t[p, c % w]), int(st.lp_done[p, c % w]))
                        for c in range(int(st.lp_fin[p]), int(st.lp_adm[p]))])
    streaming = None
    if sim.inputs.pipeline.streaming:
        ctl = st.lp_ctl
        streaming = {"loaded": int(ctl[K.CTL_LOADED]), "loading": bool(ctl[K.CTL_LOADING]),
                     "load_end": int(ctl[K.CTL_LOAD_END]), "wait_cycles": int(ctl[K.CTL_WAIT])}
    return {"taken": [int(x) for x in st.lp_taken.ravel()], "got": [int(x) for x in st.lp_got.ravel()],
            "admitted": [int(x) for x in st.lp_adm], "finished": [int(x) for x in st.lp_fin],
            "took": [int(x) for x in st.lp_took], "pending": pending,
            "streaming": streaming}


def kernel_snapshot(sim: MeshSim) -> dict:
    """The kernel's state in the reference's canonical snapshot form (counts modulo 2K)."""
    st, inp = sim.state, sim.inputs
    rows, cols, _cap, kbuf = inp.rows, inp.cols, inp.queue_capacity, inp.link_buffer_messages
    wrap = 2 * kbuf
    slot = (sim.cycle - 1) % inp.history
    queue, server, links, sent, received = [], [], [], [], []
    for r in range(rows):
        for c in range(cols):
            n = int(st.q_len[r, c])
            queue.append([(int(st.q_work[i, r, c]), int(st.q_birth[i, r, c]), int(st.q_hops[i, r, c]))
                          for i in range(n)])
            rem = int(st.s_rem[r, c])
            server.append(None if rem == 0 else (rem, int(st.s_birth[r, c]), int(st.s_hops[r, c])))
            sent.append([int(x) for x in st.sent_h[slot, r, c]])
            received.append([int(x) for x in st.recv_h[slot, r, c]])
            pe_links = []
            for d, (dr, dc) in enumerate(((-1, 0), (0, 1), (1, 0), (0, -1))):
                nr, nc = r + dr, c + dc
                if not (0 <= nr < rows and 0 <= nc < cols):
                    pe_links.append([])
                    continue
                got = int(st.recv_h[slot, nr, nc, (d + 2) % 4])
                k = (int(st.sent_h[slot, r, c, d]) - got) % wrap
                msgs = []
                for j in range(k):
                    m = int(st.link[r, c, d, (got + j) % kbuf])
                    if m >> 63:
                        msgs.append(("p", (m >> 44) & 0xFFF, (m >> 32) & 0xFFF, m & 0xFFFFFFFF))
                    elif m & 0xFFFF == 0:
                        msgs.append({1: ("request",), 2: ("refusal",)}[(m >> 16) & 0xFF])
                    else:
                        msgs.append((m & 0xFFFF, (m >> 24) & 0xFFFFFFFF, (m >> 16) & 0xFF))
                pe_links.append(msgs)
            links.append(pe_links)
    source = [[] for _ in range(rows * cols)]
    router = [[[] for _ in range(5)] for _ in range(rows * cols)]
    traffic = inp.traffic
    pipeline = _pipeline_snapshot(sim, source) if inp.pipeline is not None else None
    if inp.routed:
        cfg = dict(zip(CFG_FIELDS, inp.cfg.tolist(), strict=True))
        for r in range(rows):
            for c in range(cols):
                tb, u = int(st.src_scan[r, c]), r * cols + c
                while traffic and len(source[u]) < int(st.src_pending[r, c]):
                    dr, dc = K._offered_packet(seed=np.uint64(inp.seed), tb=tb, u=u, r=r, c=c, thr_u=st.thr[r, c],
                                               rows=rows, cols=cols, pattern=cfg["pattern"],
                                               hot_thr=cfg["hot_threshold"], hot_r=cfg["hot_row"],
                                               hot_c=cfg["hot_col"])
                    if dr >= 0:
                        source[u].append((int(dr), int(dc), tb))
                    tb += 1
                for o in range(5):
                    for i in range(int(st.oq_len[r, c, o])):
                        m = int(st.oq[r, c, o, i])
                        router[u][o].append(((m >> 44) & 0xFFF, (m >> 32) & 0xFFF, m & 0xFFFFFFFF))
    busy = busy_cycles(st).ravel()
    totals = {"busy": busy, "injected": st.tot_injected.ravel(), "refused": st.tot_refused.ravel(),
              "completed": st.tot_completed.ravel(), "migrated_out": st.tot_migrated_out.ravel(),
              "migrated_in": st.tot_migrated_in.ravel(), "latency_sum": st.tot_latency.ravel()}
    if inp.routed:
        totals.update(packets_offered=st.tot_pkt_offered.ravel(), packets_delivered=st.tot_pkt_delivered.ravel())
    out = {"queue": queue, "server": server, "links": links, "sent": sent, "received": received, "source": source,
           "router": router, "pipeline": pipeline, "shedding": [int(x) for x in st.shed.ravel()] if inp.sheds else None,
           "pressure": [int(x) for x in st.press_h[(sim.cycle - 1) % inp.history].ravel()]
           if inp.gradient and sim.cycle > 0 else None,
           "stealing": [(int(v >> 4) - 1, tuple(int(v >> d) & 1 for d in range(4))) for v in st.steal.ravel()]
           if inp.stealing else None,
           "totals": {k: [int(x) for x in v] for k, v in totals.items()}, "wrap": wrap}
    if inp.counts_directions:
        out["totals"]["migrated_dir"] = [[int(x) for x in st.tot_mig_dir[r, c]]
                                         for r in range(rows) for c in range(cols)]
    if inp.routed:
        out["totals"]["link_sent"] = [[int(x) for x in st.link_total[r, c]] for r in range(rows) for c in range(cols)]
    return out


def quiet_segments(sim) -> int:
    """Segments that the kernel's next cycle skips unless a trace event falls in them (docs/mesh.md,
    "Implementation notes"): idle, offered nothing, and no change in them or around them for H cycles."""
    st, t, h = sim.state, sim.cycle, sim.inputs.history
    calm = np.pad(st.seg_chg[(t - 1) & 1] <= t - h, 1, constant_values=True)
    around = calm[1:-1, 1:-1] & calm[:-2, 1:-1] & calm[2:, 1:-1] & calm[1:-1, :-2] & calm[1:-1, 2:]
    return int(((st.seg_idle == 1) & (st.seg_live == 0) & around).sum())


def compare_cycle_by_cycle(sc, cycles, trace_events=None):
    """Run kernel and reference together, asserting equal state and observables after every cycle.

    Returns the reference's cumulative series (for tests that want to check the case did something).
    """
    ref = reference_for(sc, trace_events)
    sim = MeshSim(build_inputs(sc), max_chunk=1)
    hysteresis = int(sim.inputs.cfg[K.CFG_HYSTERESIS])
    migrating, threshold = sc.get("migration", "policy") != "none", sc.get("migration", "threshold")
    totals = {k: 0 for k in SERIES_KEYS}
    totals["quiet_segments"] = 0
    totals["shedding_within_threshold"] = 0  # PE-cycles that go on shedding with a queue at most T
    for t in range(cycles):
        totals["quiet_segments"] += quiet_segments(sim)
        obs = ref.step()
        sim.advance(1)
        row = sim.series[0]
        for key, col in SERIES_KEYS.items():
            assert int(row[col]) == obs[key], f"cycle {t}: series {key}: kernel {int(row[col])} != reference {obs[key]}"
            totals[key] += obs[key]
        assert [int(x) for x in sim.depth_series[0]] == obs["depth_hist"], f"cycle {t}: depth histogram"
        fast = kernel_snapshot(sim)
        slow = ref.snapshot()
        wrap = fast["wrap"]
        if fast["pipeline"] != slow.get("pipeline"):
            raise AssertionError(f"cycle {t}: pipeline state: kernel {fast['pipeline']} != "
                                 f"reference {slow['pipeline']}")
        for key in ("queue", "server", "links", "source", "router"):
            if fast[key] != slow[key]:
                u = next(i for i in range(len(fast[key])) if fast[key][i] != slow[key][i])
                raise AssertionError(f"cycle {t}: {key} of PE {u}: kernel {fast[key][u]} != reference {slow[key][u]}")
        if hysteresis:
            assert fast["shedding"] == slow["shedding"], f"cycle {t}: shedding flags"
            totals["shedding_within_threshold"] += sum(
                f and len(q) <= threshold for f, q in zip(slow["shedding"], slow["queue"], strict=True))
        else:  # (docs/mesh.md, step 4: without hysteresis a PE sheds exactly while its queue exceeds T)
            assert slow["shedding"] == [int(migrating and len(q) > threshold) for q in slow["queue"]], \
                f"cycle {t}: shedding flags without hysteresis"
        assert fast["pressure"] == slow["pressure"], f"cycle {t}: pressures"
        assert fast["stealing"] == slow["stealing"], f"cycle {t}: steal states (outstanding request, owed answers)"
        assert fast["sent"] == [[x % wrap for x in v] for v in slow["sent"]], f"cycle {t}: send counts"
        assert fast["received"] == [[x % wrap for x in v] for v in slow["received"]], f"cycle {t}: receive counts"
        for key, v in slow["totals"].items():
            if key == "link_sent" and key not in fast["totals"]:
                continue  # per-link totals are kept for routed traffic only; "sent" covers the counts
            if key == "migrated_dir" and key not in fast["totals"]:
                continue  # (the kernel keeps them only where the run reports its regions' crossings)
            if key in ("packets_offered", "packets_delivered") and key not in fast["totals"]:
                assert not any(v), f"cycle {t}: {key} without traffic"
                continue
            assert fast["totals"][key] == [list(x) if isinstance(x, list) else x for x in v], \
                f"cycle {t}: per-PE totals {key}"
    sim.audit()
    if sim.inputs.counts_directions:
        fast = kernel_snapshot(sim)
        assert fast["totals"]["migrated_out"] == [sum(x) for x in fast["totals"]["migrated_dir"]], \
            "the per-direction migrations add up to the migrated tasks"
    return totals
