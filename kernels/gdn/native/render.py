"""Tables of the native K1 / K2 results (markdown + LaTeX), byte-deterministic: fixed float formats, no timestamps.

:func:`bench_table` renders the K1 table of ``bench.json`` and, when the file has them, the K2 timing and
whole-backward tables after it (a bench.json without K2 keys renders exactly as before).
"""

from __future__ import annotations

BENCH_COLS = [("T", "T", "{:d}"), ("V", "d_v", "{:d}"), ("BH", "B*H", "{:d}"), ("floor_ms", "floor ms", "{:.3f}"),
              ("native_bv32_s2_ms", "native BV32 ms", "{:.3f}"), ("native_bv64_s2_ms", "native BV64 ms", "{:.3f}"),
              ("native_bv16_s1_ms", "native BV16 ms", "{:.3f}"), ("native_best_over_floor", "best/floor", "{:.2f}"),
              ("torch_ms", "torch K1 ms", "{:.3f}"), ("speedup_vs_torch", "x torch", "{:.2f}"),
              ("triton", "Triton K1", "{}")]


def _cell(row, key, fmt):
    if key == "triton":
        if "triton_ieee_ms" in row:
            return "{:.3f} ms".format(row["triton_ieee_ms"])
        err = row.get("triton_ieee_error", "")
        return "not launchable (shared memory)" if "shared memory" in err else ("error" if err else "-")
    v = row.get(key)
    return "-" if v is None else fmt.format(v)


def _both(header, rows, caption):
    md = "| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n"
    md += "".join("| " + " | ".join(r) + " |\n" for r in rows)
    md += "\n" + caption + "\n"

    def esc(s):
        return s.replace("_", r"\_").replace("%", r"\%").replace("#", r"\#")

    tex = "\\begin{tabular}{" + "l" * len(header) + "}\n\\hline\n" + " & ".join(esc(h) for h in header) + " \\\\\n\\hline\n"
    tex += "".join(" & ".join(esc(c) for c in r) + " \\\\\n" for r in rows)
    tex += "\\hline\n\\end{tabular}\n% " + esc(caption) + "\n"
    return md, tex


K2_COLS = [("T", "T", "{:d}"), ("V", "d_v", "{:d}"), ("BH", "B*H", "{:d}"), ("chunks", "chunks", "{:d}"),
           ("floor_ms", "floor ms", "{:.3f}"), ("native_ms", "native K2 ms", "{:.3f}"),
           ("native_over_floor", "native/floor", "{:.2f}"), ("torch_ms", "torch K2 ms", "{:.3f}"),
           ("speedup_vs_torch", "x torch", "{:.2f}")]
BWD_COLS = [("T", "T", "{:d}"), ("V", "d_v", "{:d}"), ("BH", "B*H", "{:d}"), ("torch_ms", "torch bwd ms", "{:.3f}"),
            ("native_k1_ms", "native K1 bwd ms", "{:.3f}"), ("native_k1k2_ms", "native K1+K2 bwd ms", "{:.3f}"),
            ("speedup_native_k1_vs_torch", "x torch (K1)", "{:.2f}"),
            ("speedup_native_k1k2_vs_torch", "x torch (K1+K2)", "{:.2f}")]


def k2_tables(result: dict) -> tuple[str, str]:
    """The K2 timing table and the whole-backward table (H200), captions with the K2 correctness summary;
    empty strings when ``result`` has none of the K2 keys."""
    if not any(k in result for k in ("k2_timing", "k2_correctness", "backward_timing")):
        return "", ""
    corr = result.get("k2_correctness", [])
    outs = ("dXe", "du", "dA")
    worst_t = max((r[f"{o}_rel_vs_torch32"] for r in corr for o in outs), default=float("nan"))
    worst_f = max((r[f"{o}_rel_vs_f64_same_operands"] for r in corr for o in outs), default=float("nan"))
    ok = all(r["bitwise_3runs"] and r["nan_free"] and r["dA_upper_zero"] for r in corr) if corr else False
    ceil = result.get("ceilings", {})
    rows = [[_cell(r, k, f) for k, _, f in K2_COLS] for r in result.get("k2_timing", [])]
    cap = ("K2 (WY / triangular-inverse VJP: dXe, du, dA), sm_90a SIMT kernel, float32, d_k=128, C=64, on {dev}; "
           "median of CUDA-event timings, native and torch on the same operands. Correctness before timing: {n} "
           "configurations, worst rel. error vs torch float32 {wt:.1e}, vs float64 on the same operands {wf:.1e}; "
           "all outputs written, dA zero on and above the diagonal, bitwise identical over 3 runs: {b}. "
           "Floor = max(bytes / {bw:.0f} GB/s copy, FLOPs / {fl:.1f} TFLOP/s fp32 matmul).").format(
        dev=result.get("device", "?"), n=len(corr), wt=worst_t, wf=worst_f, b="yes" if ok else "no",
        bw=ceil.get("copy_GBps", float("nan")), fl=ceil.get("fp32_matmul_TFLOPs", float("nan")))
    md, tex = _both([h for _, h, _ in K2_COLS], rows, cap)
    brows = [[_cell(r, k, f) for k, _, f in BWD_COLS] for r in result.get("backward_timing", [])]
    bcap = ("Whole chunked backward (float32, d_k=128, C=64) on {dev}: torch, native K1 only, native K1 + K2; "
            "B*H capped so the torch path's [chunks, C, C, d_k] pairwise tensors fit in memory.").format(
        dev=result.get("device", "?"))
    bmd, btex = _both([h for _, h, _ in BWD_COLS], brows, bcap)
    return md + "\n" + bmd, tex + "\n" + btex


def bench_table(result: dict) -> tuple[str, str]:
    """The K1 timing table (H200) with the correctness summary as its caption, then the K2 tables when the
    result has K2 keys (:func:`k2_tables`)."""
    md, tex = _k1_bench_table(result)
    for more in (k2_tables(result), k1_wgmma_table(result), k2_wgmma_table(result)):
        if more[0]:
            md, tex = md + "\n" + more[0], tex + "\n" + more[1]
    return md, tex


WGMMA_COLS = [("T", "T", "{:d}"), ("V", "d_v", "{:d}"), ("BH", "B*H", "{:d}"), ("floor_bytes_ms", "floor ms", "{:.3f}"),
              ("wgmma_ms", "wgmma K1 ms", "{:.3f}"), ("wgmma_bf16_in_ms", "bf16 in ms", "{:.3f}"),
              ("wgmma_split_ms", "split ms", "{:.3f}"), ("wgmma_over_floor", "wgmma/floor", "{:.2f}"),
              ("simt_ms", "SIMT K1 ms", "{:.3f}"), ("speedup_vs_simt", "x SIMT", "{:.2f}")]


def _worst_vs_f64(corr: list[dict], outs: tuple[str, ...]) -> tuple[float, float]:
    """Worst error against float64 over a tensor-core kernel's correctness rows and outputs, and the worst of
    its bf16 model's (bench.py's ``within_bf16_model`` keys); nan without rows."""
    def worst(key):
        return max((float(r[f"{o}_{key}"]) for r in corr for o in outs), default=float("nan"))
    return worst("rel_vs_f64"), worst("bf16_model_rel_vs_f64")


def k1_wgmma_table(result: dict) -> tuple[str, str]:
    """The Hopper tensor-core K1 (``k1_hopper_wgmma``: TMA + wgmma, bf16 operands, fp32 accumulation) against the
    float32 SIMT K1 on the same problem; caption with its correctness summary. Empty strings without the keys."""
    timing, corr = result.get("k1_wgmma_timing", []), result.get("k1_wgmma_correctness", [])
    if not timing and not corr:
        return "", ""
    worst, worst_model = _worst_vs_f64(corr, ("dS_next", "dd", "dS0"))
    ok = all(r["passed"] and r["bitwise_3runs"] and r["finite"] for r in corr) if corr else False
    rows = [[_cell(r, k, f) for k, _, f in WGMMA_COLS] for r in timing]
    cap = ("K1 on Hopper tensor cores (sm_90a, TMA + wgmma, bf16 operands, fp32 accumulation, dS in registers "
           "across the chunk loop), d_k=128, C=64, on {dev}; median of CUDA-event timings; SIMT K1 = the float32 "
           "CuTe K1 on the same problem. Correctness before timing: {n} configurations on GDN data, worst rel. "
           "error vs float64 {w:.1e} (the kernel's own bf16-operand model: {m:.1e}), finite and bitwise identical "
           "over 3 runs: {b}. wgmma K1 ms includes casting the float32 operands to bf16 in the call; bf16 in ms: "
           "the same kernel handed bf16 operands; split ms: P and Qg as bf16 hi/lo pairs (two more products), "
           "operands prepared beforehand (columns from later runs; - where not run). Floor = bf16 operand bytes / "
           "measured copy bandwidth.").format(
        dev=result.get("device", "?"), n=len(corr), w=worst, m=worst_model, b="yes" if ok else "no")
    return _both([h for _, h, _ in WGMMA_COLS], rows, cap)


K2_WGMMA_COLS = [("T", "T", "{:d}"), ("V", "d_v", "{:d}"), ("BH", "B*H", "{:d}"), ("chunks", "chunks", "{:d}"),
                 ("floor_bytes_ms", "floor ms", "{:.3f}"), ("wgmma_ms", "wgmma K2 ms", "{:.3f}"),
                 ("wgmma_bf16_in_ms", "bf16 in ms", "{:.3f}"), ("wgmma_bf16_in_over_floor", "bf16 in/floor", "{:.2f}"),
                 ("simt_ms", "SIMT K2 ms", "{:.3f}"), ("speedup_vs_simt", "x SIMT (bf16 in)", "{:.2f}")]


def k2_wgmma_table(result: dict) -> tuple[str, str]:
    """The Hopper tensor-core K2 (``k2_hopper_wgmma``: TMA + wgmma, bf16 operands and intermediates, fp32
    accumulation) against the float32 SIMT K2; caption with its correctness summary and the shapes the time
    budget left out. Empty strings without the keys."""
    timing, corr = result.get("k2_wgmma_timing", []), result.get("k2_wgmma_correctness", [])
    if not timing and not corr:
        return "", ""
    outs = ("dXe", "du", "dA")
    worst, worst_model = _worst_vs_f64(corr, outs)
    worst_simt = max((float(r[f"{o}_simt_rel_vs_f64"]) for r in corr for o in outs), default=float("nan"))
    ok = all(r["passed"] and r["bitwise_3runs"] and r["finite"] and r["dA_upper_zero"] for r in corr) if corr else False
    done = [r for r in timing if "skipped" not in r]
    left = [f"T={r['T']} d_v={r['V']}" for r in timing if "skipped" in r]
    rows = [[_cell(r, k, f) for k, _, f in K2_WGMMA_COLS] for r in done]
    cap = ("K2 (the WY / triangular-inverse VJP) on Hopper tensor cores (sm_90a, TMA + wgmma, bf16 operands and "
           "intermediates, fp32 accumulation), d_k=128, C=64, on {dev}; median of CUDA-event timings; SIMT K2 = "
           "the float32 CuTe K2 on the same operands. Correctness before timing: {n} configurations on GDN data, "
           "worst rel. error vs float64 {w:.1e} (its own bf16 model: {m:.1e}; the SIMT K2: {s:.1e}), dA zero on "
           "and above the diagonal, finite and bitwise identical over 3 runs: {b}. wgmma K2 ms includes casting "
           "the float32 operands to bf16 in the call; bf16 in ms: handed bf16 operands. Floor = bf16 operand and "
           "float32 result bytes / measured copy bandwidth.{left} Not wired into a backend: its bf16 error is "
           "about 10^4 times the SIMT K2's.").format(
        dev=result.get("device", "?"), n=len(corr), w=worst, m=worst_model, s=worst_simt, b="yes" if ok else "no",
        left=(" Not timed (time budget of the call): " + ", ".join(left) + ".") if left else "")
    return _both([h for _, h, _ in K2_WGMMA_COLS], rows, cap)


def _k1_bench_table(result: dict) -> tuple[str, str]:
    rows = [[_cell(r, k, f) for k, _, f in BENCH_COLS] for r in result.get("timing", [])]
    corr = result.get("k1_correctness", [])
    worst = max((r["ddelta_rel_vs_f64"] for r in corr), default=float("nan"))
    bitwise = all(r["bitwise_3runs"] for r in corr) if corr else False
    ceil = result.get("ceilings", {})
    cap = ("K1 (reverse-time state scan), float32, d_k=128, C=64, on {dev}; median of CUDA-event timings. "
           "Correctness before timing: {n} configurations, worst d-delta rel. error vs float64 {w:.1e}, "
           "bitwise identical over 3 runs: {b}. Floor = max(bytes / {bw:.0f} GB/s copy, FLOPs / {fl:.1f} TFLOP/s "
           "fp32 matmul), both measured on the device.").format(
        dev=result.get("device", "?"), n=len(corr), w=worst, b="yes" if bitwise else "no",
        bw=ceil.get("copy_GBps", float("nan")), fl=ceil.get("fp32_matmul_TFLOPs", float("nan")))
    return _both([h for _, h, _ in BENCH_COLS], rows, cap)


def aot_table(result: dict) -> tuple[str, str]:
    """Ahead-of-time compile facts per kernel and architecture."""
    header = ["kernel", "arch", "d_v", "MMA instr.", "TMEM cols", "alloc/dealloc/relinquish", "REG", "STACK",
              "spill ops", "status"]
    rows = []
    for r in sorted(result.get("rows", []), key=lambda r: (r["kernel"], r["cfg"]["V"], not r["cfg"].get("erase", True),
                                                           r["cfg"].get("split", False))):
        pc, cub = r["ptx_counts"], r["cubin"]
        mma = ("tcgen05.mma x{}".format(pc["tcgen05_mma"]) if pc["tcgen05_mma"] else
               "wgmma x{}".format(pc["wgmma"]) if pc["wgmma"] else
               "mma.sync x{}".format(pc["mma_sync"]) if pc["mma_sync"] else "none (FFMA)")
        cols = ",".join(str(c) for c in r["tmem_alloc_columns"]) or "-"
        name = (r["kernel"] + (" (no erase, no dS_final)" if r["cfg"].get("erase") is False else "")
                + (" (split: P, Qg as bf16 hi/lo)" if r["cfg"].get("split") else ""))
        rows.append([name, r["arch"], str(r["cfg"]["V"]), mma, cols,
                     "{}/{}/{}".format(pc["tcgen05_alloc"], pc["tcgen05_dealloc"], pc["tcgen05_relinquish"]),
                     str(cub.get("reg", "-")), str(cub.get("stack", "-")), str(cub.get("sass_spill_ops", "-")),
                     r["status"]])
    cap = ("Native kernels compiled ahead of time on a CPU (nvidia-cutlass-dsl 4.8.1, fake tensors). "
           "sm_100a rows: compiled, not executed (no B200). k1_blackwell is one product of K1 (sum of Qg^T dO), "
           "k1_blackwell_scan the whole K1 (MMA count per chunk of its loop), k1_hopper_wgmma the whole K1 on "
           "Hopper tensor cores (wgmma per warpgroup per chunk; executed on the H200, see native_bench), k2_* the "
           "whole K2 (k2_hopper_wgmma: Hopper tensor cores, wgmma per warpgroup per chunk, not yet executed).")
    return _both(header, rows, cap)


# Kernel families of lethe.kernels.gdn.native.kernel_profile (FAMILY_LABELS), in column order; short headers
# for the table.
PROFILE_FAMILIES = [("Triton", "Triton ms"), ("CuTe DSL (native K1/K2)", "CuTe DSL ms"),
                    ("matmul (cuBLAS)", "cuBLAS ms"), ("torch copy / index / fill", "torch copy ms"),
                    ("torch elementwise", "torch elementwise ms"), ("torch reduction / scan", "torch reduction ms"),
                    ("other", "other ms")]
PROFILE_HEADER = (["call", "impl", "member", "d_v", "T", "B*H", "bwd ms", "fwd+bwd ms", "kernels", "kernel sum ms",
                   "idle ms"]
                  + [h for _, h in PROFILE_FAMILIES] + ["heaviest kernel (ms)"])


def _short_kernel(name: str) -> str:
    """A readable name for a kernel: Triton names as they are, CuTe DSL kernels by their class, templated C++
    kernels by their function name."""
    for cls in ("K1ReverseScan", "WYTriInvVJPHopper"):
        if cls in name:
            return f"CuTe {cls}"
    base = name.split("<", 1)[0].replace("void ", "").strip()
    return base.rsplit("::", 1)[-1] if "::" in base else base


GENERAL_SGDN = "sgdn (general kernels)"


def member_label(r: dict) -> str:
    """The member a profile row measured: an sgdn row of our implementations that records no ``gate_form`` in its
    forward options predates the scalar-gate path (kernels/gdn/scalar_gate.py, chunk_family's default for that
    member since 917623b) and timed the general per-channel kernels, so it is labelled as such; our sgdn numbers
    of the scalar-gate path are in paper/tables/gdn_scalar_gate_time."""
    if r["member"] == "sgdn" and r["impl"].split("@")[0] != "fla" and "gate_form" not in r.get("fwd_options", {}):
        return GENERAL_SGDN
    return r["member"]


def _heads_cell(r: dict) -> str:
    """The B*H cell of a profile row, naming H where it is not the profile's default of 2 (model shapes)."""
    return str(r["B"] * r["H"]) if r["H"] == 2 else f"{r['B'] * r['H']} (H={r['H']})"


def profile_table(calls: list[tuple[str, dict, dict]]) -> tuple[str, str]:
    """One line per profiled (call, implementation, cell) of ``kernel_profile.py`` results: the backward's
    CUDA-event median, the kernel trace summed by family, the heaviest kernel. ``calls`` holds
    (call name, profile.json, provenance.json) in call order; rows that did not run are listed in the caption."""
    rows, missing, shas = [], [], []
    for name, doc, prov in calls:
        shas.append(f"{name} {str(prov.get('git_sha', '?'))[:7]}")
        for r in doc.get("rows", []):
            cell = f"{r['member']} d_v={r['V']} T={r['T']} B={r['B']}"
            if r.get("status") != "ok":
                missing.append(f"{name} {r['impl']} at {cell}: {r.get('status')} ({str(r.get('reason', ''))[:90]})")
                continue
            p = r["profile"]
            fam = p.get("families", {})
            top = (p.get("top_kernels") or [{}])[0]
            rows.append([name, r["impl"], member_label(r), str(r["V"]), str(r["T"]),
                         _heads_cell(r),
                         f"{r['bwd_wall_ms']:.3f}",
                         f"{r['fwd_bwd_wall_ms']:.3f}" if "fwd_bwd_wall_ms" in r else "-",
                         str(p["kernels"]), f"{p['kernel_sum_ms']:.3f}",
                         f"{p['idle_in_span_ms']:.3f}"]
                        + [f"{fam[f]['ms']:.3f}" if f in fam else "-" for f, _ in PROFILE_FAMILIES]
                        + [f"{_short_kernel(top.get('name', '-'))} ({top.get('ms', float('nan')):.3f})"])
    dev = next((d.get("device") for _, d, _ in calls if d.get("device")), "?")
    cap = ("Where the GDN backward's time goes on {dev}: bf16 inputs, d_k=128, H=2 where the B*H column names no H; bwd ms is the median of "
           "CUDA-event timings of torch.autograd.grad after the forward (no profiler attached; two input sets "
           "rotated where the row says so in profile.json); fwd+bwd ms the same for forward and backward together "
           "(rows from later calls); the other columns come from one profiled backward "
           "(the repetition with the median summed kernel time): kernel launches, summed kernel time, GPU idle "
           "time between the first and the last kernel, and time per kernel family. Each implementation's "
           "gradients were checked against ours before it was profiled (profile.json, check_vs_ours_rel). "
           "Commits: {shas}.").format(dev=dev, shas=", ".join(shas))
    if missing:
        cap += " Not profiled: " + "; ".join(missing) + "."
    md, tex = _both(PROFILE_HEADER, rows, cap)
    fmd, ftex = forward_profile_table(calls)
    if fmd:
        md, tex = md + "\n" + fmd, tex + "\n" + ftex
    return md, tex


def forward_profile_table(calls: list[tuple[str, dict, dict]]) -> tuple[str, str]:
    """The forward's kernels, from the rows that profiled one forward (``fwd_profile``): where a forward +
    backward gap comes from. Empty strings when no row has one."""
    rows = []
    for name, doc, _ in calls:
        for r in doc.get("rows", []):
            fp = r.get("fwd_profile")
            if r.get("status") != "ok" or not fp:
                continue
            top = ", ".join(f"{_short_kernel(k['name'])} {k['ms']:.2f}" for k in fp.get("top_kernels", [])[:4])
            rows.append([name, r["impl"], member_label(r), str(r["V"]), str(r["T"]), _heads_cell(r),
                         f"{r['fwd_bwd_wall_ms'] - r['bwd_wall_ms']:.3f}" if "fwd_bwd_wall_ms" in r else "-",
                         str(fp.get("kernels", "-")), f"{fp.get('kernel_sum_ms', float('nan')):.3f}", top])
    if not rows:
        return "", ""
    dev = next((d.get("device") for _, d, _ in calls if d.get("device")), "?")
    cap = ("The forward's kernels on {dev} (same cells and inputs as the backward profile): fwd ms = fwd+bwd ms "
           "minus bwd ms (both CUDA-event medians); H=2 where the B*H column names no H; kernels and kernel sum from one profiled forward; the "
           "heaviest kernels with their ms.").format(dev=dev)
    return _both(["call", "impl", "member", "d_v", "T", "B*H", "fwd ms", "kernels", "kernel sum ms",
                  "heaviest kernels (ms)"], rows, cap)


# ---------------------------------------------------------------- hybrid-tc / ours / fla, one device call
VS_IMPLS = ("ours", "hybrid-tc", "fla")


def versus_fla_calls(calls: list[tuple[str, dict, dict]]) -> list[tuple[str, dict]]:
    """(call name, {cell: {impl: row}}) of every call whose rows time hybrid-tc and fla on the same cells, newest
    first; cell = (member, d_v, T, B*H). Cells never mix calls: every ratio divides medians measured minutes
    apart on one machine. Rows with forward options (``hybrid-tc@...``) are not hybrid-tc's defaults: left out."""
    out = []
    for name, doc, _ in reversed(calls):
        cells: dict = {}
        for r in doc.get("rows", []):
            if r.get("status") == "ok" and r["impl"] in VS_IMPLS:
                cells.setdefault((r["member"], r["V"], r["T"], r["B"] * r["H"]), {})[r["impl"]] = r
        cells = {k: v for k, v in cells.items() if "hybrid-tc" in v and "fla" in v}
        # a cell is named after what hybrid-tc ran there (member_label: the general kernels on older sgdn rows)
        cells = {(member_label(v["hybrid-tc"]), *k[1:]): v for k, v in cells.items()}
        if cells:
            out.append((name, _cell_order(cells)))
    return out


def versus_fla_call(calls: list[tuple[str, dict, dict]]):
    """The newest of :func:`versus_fla_calls` (``(None, {})`` when no call has both)."""
    found = versus_fla_calls(calls)
    return found[0] if found else (None, {})


FIGURE_MIN_CELLS = 4


def _cell_order(cells: dict) -> dict:
    return dict(sorted(cells.items(), key=lambda kv: (kv[0][0], -kv[0][1], kv[0][2])))


def figure_versus_fla_call(calls: list[tuple[str, dict, dict]]):
    """The figure's calls and cells: the calls of the newest commit whose cells together number at least
    FIGURE_MIN_CELLS (the newest code with a spread of shapes; one commit's calls ran the same code, and each cell
    still comes from one call, the newest where a cell repeats), else the single call with the most cells (the
    newest of equals). The name joins the calls' names with "+", oldest first."""
    # the figure shows what the code runs now: sgdn cells timed on the general kernels are in the table only
    found = [(n, {k: v for k, v in cells.items() if k[0] != GENERAL_SGDN}) for n, cells in versus_fla_calls(calls)]
    found = [(n, cells) for n, cells in found if cells]
    if not found:
        return None, {}
    sha = {n: str(p.get("git_sha", "?")) for n, _, p in calls}
    groups: list[list] = []  # runs of calls at one commit, newest first
    for name, cells in found:
        if groups and sha[groups[-1][0][0]] == sha[name]:
            groups[-1].append((name, cells))
        else:
            groups.append([(name, cells)])
    for group in groups:
        merged: dict = {}
        for _, cells in reversed(group):  # oldest first: a newer call's cell replaces an older one's
            merged.update(cells)
        if len(merged) >= FIGURE_MIN_CELLS:
            return "+".join(n for n, _ in reversed(group)), _cell_order(merged)
    return max(found, key=lambda nc: len(nc[1]))


def versus_fla_table(calls: list[tuple[str, dict, dict]]) -> tuple[str, str]:
    """Backward and forward + backward medians of ours (Triton), hybrid-tc and fla per call and cell (newest
    call first), the ratios to fla, and the roofline floor where the call measured ceilings."""
    found = versus_fla_calls(calls)
    header = (["call", "member", "d_v", "T", "B*H"] + [f"bwd {i} ms" for i in VS_IMPLS]
              + ["fla / hybrid-tc (bwd)", "bwd floor ms", "hybrid-tc % floor"]
              + [f"fwd+bwd {i} ms" for i in VS_IMPLS] + ["hybrid-tc / fla (fwd+bwd)"])
    rows, notes = [], []
    for name, cells in found:
        doc = next(d for n, d, _ in calls if n == name)
        prov = next(p for n, _, p in calls if n == name)
        sha = str(prov.get("git_sha", "?"))[:7]
        ceil = doc.get("ceilings") or {}
        notes.append(f"{name} = commit {sha}" + (", ceilings {:.0f} TFLOP/s and {:.2f} TB/s measured in the call".format(
            ceil["bf16_matmul_tflops"], ceil["copy_tbps"]) if ceil.get("measured") else ", ceilings not measured"))
        for (member, V, T, BH), got in cells.items():
            hy, fla = got["hybrid-tc"], got["fla"]

            def ms(impl, key, got=got):
                r = got.get(impl)
                return f"{r[key]:.2f}" if r and key in r else "-"
            floor = hy.get("bwd_floor_ms")
            rows.append([name, member, str(V), str(T), str(BH)] + [ms(i, "bwd_wall_ms") for i in VS_IMPLS]
                        + [f"{fla['bwd_wall_ms'] / hy['bwd_wall_ms']:.2f}x",
                           f"{floor:.2f}" if floor else "-",
                           f"{100 * floor / hy['bwd_wall_ms']:.0f}%" if floor else "-"]
                        + [ms(i, "fwd_bwd_wall_ms") for i in VS_IMPLS]
                        + [f"{hy['fwd_bwd_wall_ms'] / fla['fwd_bwd_wall_ms']:.2f}x"
                           if "fwd_bwd_wall_ms" in hy and "fwd_bwd_wall_ms" in fla else "-"])
    if not rows:
        return "", ""
    dev = next((d.get("device") for n, d, _ in calls if n == found[0][0]), "?")
    cap = ("GDN-family backward on {dev}, one block per run of the current result (results/native/profile/; newest first; {notes}): bf16, d_k=128, H=2, "
           "CUDA-event medians of torch.autograd.grad after the forward (bwd) and of forward + backward, two input "
           "sets rotated. ours = the Triton backend; hybrid-tc = Triton forward and intra-chunk backward with K1 "
           "(the reverse state scan) on Hopper tensor cores in the CuTe DSL and a fused Triton tail; fla = fla "
           "0.6.0 (chunk_gdn2; chunk_gated_delta_rule for sgdn, its #640 guard bypassed as documented), "
           "FLA_DISABLE_BACKEND_DISPATCH=1; '-' = not run in that call. Every implementation's gradients were "
           "checked against ours before timing. Floor = max(FLOPs / bf16 matmul rate, minimal bytes / copy "
           "bandwidth).").format(dev=dev, notes="; ".join(notes))
    return _both(header, rows, cap)


def versus_fla_figure(calls: list[tuple[str, dict, dict]], outdir="figures", stem: str = "native_vs_fla"):
    """Grouped bars per cell: backward (top) and forward + backward (bottom) ms of ours, hybrid-tc and fla, the
    backward floor as a tick where measured. Returns the (png, pdf) paths."""
    from lethe.render.style import OKABE_ITO, new_figure, save_figure, style

    name, cells = figure_versus_fla_call(calls)
    keys = list(cells)
    colors = {"ours": OKABE_ITO["sky_blue"], "hybrid-tc": OKABE_ITO["vermillion"], "fla": OKABE_ITO["bluish_green"]}
    with style():
        fig, (top, bot) = new_figure(max(6.0, 1.1 * len(keys) + 1.5), 5.2, nrows=2, sharex=True)
        width = 0.26
        for ax, key, label in ((top, "bwd_wall_ms", "backward ms"), (bot, "fwd_bwd_wall_ms", "forward + backward ms")):
            for j, impl in enumerate(VS_IMPLS):
                xs = [i + (j - 1) * width for i, k in enumerate(keys) if key in cells[k].get(impl, {})]
                ys = [cells[k][impl][key] for k in keys if key in cells[k].get(impl, {})]
                if ys:  # an implementation the call did not time gets no bar and no legend entry
                    ax.bar(xs, ys, width, color=colors[impl], label=impl if ax is top else None)
            ax.set_ylabel(label)
            # head room for the legend above the tallest bar
            tallest = max((r[key] for k in keys for r in cells[k].values() if key in r), default=0)
            ax.set_ylim(0, 1.3 * tallest if tallest else None)
        floors = [(i, cells[k]["hybrid-tc"]["bwd_floor_ms"]) for i, k in enumerate(keys)
                  if cells[k]["hybrid-tc"].get("bwd_floor_ms")]
        if floors:
            top.scatter([i for i, _ in floors], [f for _, f in floors], marker="_", s=400, color=OKABE_ITO["black"],
                        label="bwd roofline floor", zorder=3)
        bot.set_xticks(range(len(keys)))
        bot.set_xticklabels([f"{m}\nd_v={V}\nT={T // 1024}k\nB*H={BH}" for m, V, T, BH in keys], fontsize=8)
        top.legend(loc="upper right", fontsize=8, ncols=2)
        present = [i for i in VS_IMPLS if any(i in cells[k] for k in keys)]
        first = (name or "").split("+")[0]
        sha = next((str(pr.get("git_sha", "?"))[:7] for n, _, pr in calls if n == first), "?")
        fig.suptitle(f"GDN backward and forward + backward on the H200: {', '.join(present)}\n"
                     f"({name or 'no call'}, commit {sha}; bf16, d_k 128, 2^20 head-tokens)", fontsize=10)
        return save_figure(fig, stem, outdir)
