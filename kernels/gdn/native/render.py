"""Tables of the native K1 results (markdown + LaTeX), byte-deterministic: fixed float formats, no timestamps."""

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


def bench_table(result: dict) -> tuple[str, str]:
    """The K1 timing table (H200) with the correctness summary as its caption."""
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
    for r in sorted(result.get("rows", []), key=lambda r: (r["kernel"], r["cfg"]["V"])):
        pc, cub = r["ptx_counts"], r["cubin"]
        mma = ("tcgen05.mma x{}".format(pc["tcgen05_mma"]) if pc["tcgen05_mma"] else
               "wgmma x{}".format(pc["wgmma"]) if pc["wgmma"] else
               "mma.sync x{}".format(pc["mma_sync"]) if pc["mma_sync"] else "none (FFMA)")
        cols = ",".join(str(c) for c in r["tmem_alloc_columns"]) or "-"
        rows.append([r["kernel"], r["arch"], str(r["cfg"]["V"]), mma, cols,
                     "{}/{}/{}".format(pc["tcgen05_alloc"], pc["tcgen05_dealloc"], pc["tcgen05_relinquish"]),
                     str(cub.get("reg", "-")), str(cub.get("stack", "-")), str(cub.get("sass_spill_ops", "-")),
                     r["status"]])
    cap = ("Native kernels compiled ahead of time on a CPU (nvidia-cutlass-dsl 4.8.1, fake tensors). "
           "sm_100a rows: compiled, not executed (no B200).")
    return _both(header, rows, cap)
