"""Portability: does a kernel's verdict depend on the machine, the compile target or the launch configuration?

The same kernel and contract are judged in several *settings* (the CPU interpreter and the H200; sm_90a and
sm_100a; the launch configurations a tuner picks from). Each setting contributes one set of observations, one
per (kernel, profile), in a common shape::

    {"kernel": str, "profile": str, "status": row status,
     "gates": {gate: {"status": pass|fail|na|error, "reason": str, "margin": float | None}},
     "context": {"verifier_code": ..., "tolerance": {...}}}

:func:`compare` lines the settings up and reports, per kernel and gate, the verdict in each setting and every
gate whose verdict changes, with the recorded reason and margin on each side and a class for the change
(:func:`classify_change`). The adapters (``from_*``) turn each committed result format into observations;
they add nothing the result does not record. Documentation: docs/portability.md.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

SCHEMA = "lethe.portability/1"

#: A margin (largest err/tol) in this band on every side is a borderline verdict: the kernel sits at the
#: tolerance, so ordinary rounding differences between machines flip it. Outside it, a flip is a real change
#: in the numbers the kernel produces.
BORDERLINE = (0.5, 2.0)

#: Classes of a changed verdict, in the order :func:`classify_change` tries them.
CHANGE_CLASSES = {
    "not_applicable": "na in some setting (the gate could not judge there; its reason says why)",
    "harness_error": "the gate errored in some setting (a verifier failure, not a verdict)",
    "probe_not_run": "a probe that failed in one setting was not run in another (a different probe plan), so "
                     "the settings did not judge the same inputs",
    "property_check": "a failing setting's err/tol is within tolerance or absent: it failed on a property "
                      "(non-finite positions, shape, bytes, aliasing), not on the size of an error",
    "borderline": f"err/tol within [{BORDERLINE[0]}, {BORDERLINE[1]}] in every setting that measured it",
    "margin_moves": "err/tol far from 1 in some setting: the kernel's numbers differ between settings",
    "no_margin": "a property gate (no err/tol recorded) changed: the behaviour itself differs",
}


def observation(kernel: str, profile: str, status: str, gates: Mapping[str, Mapping[str, Any]],
                context: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One observation in the common shape (see the module docstring)."""
    return {"kernel": kernel, "profile": profile, "status": status,
            "gates": {g: {"status": v.get("status"), "reason": v.get("reason") or "", "margin": v.get("margin"),
                          **({"probes": sorted(v["probes"]), "failing_probes": sorted(v.get("failing_probes", []))}
                             if v.get("probes") is not None else {})}
                      for g, v in gates.items()},
            "context": dict(context or {})}


def from_rows(rows: Iterable[Mapping[str, Any]], key: str = "id") -> list[dict[str, Any]]:
    """Observations from verdict rows (``lethe.verifier.records``). ``key="id"`` matches kernels by row id;
    ``key="source"`` by the SHA-256 of candidate and reference source (the same kernel under different ids in
    two corpora), the kernel named ``<id>@<hash prefix>`` after the first row seen."""
    from lethe.verifier.verdict import Verdict

    out = []
    for row in rows:
        v = Verdict.from_row(dict(row))
        env = _json(row.get("environment"))
        kernel = str(row["id"])
        if key == "source":
            src = _json(row.get("sources"))
            kernel = f"{src.get('cand_sha256', '')[:12]}:{src.get('ref_sha256', '')[:12]}"
        gates = {g: {"status": gv.status, "reason": gv.reason, "margin": gv.margin,
                     "probes": sorted({c.probe for c in gv.checks}), "failing_probes": gv.failing_probes}
                 for g, gv in v.gates.items()}
        obs = observation(kernel, str(row["profile"]), str(row["status"]), gates,
                          {"verifier_code": env.get("verifier_code"), "tolerance": env.get("tolerance"),
                           "plan": env.get("plan"), "id": str(row["id"])})
        out.append(obs)
    return out


def from_mamba_positive_control(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Observations from a Mamba positive-control result (schema lethe.mamba.positive_control/1): per kernel
    C1..C7 and profile, each gate's status and reason (that result records no margins)."""
    out = []
    for kid, k in sorted(doc["kernels"].items()):
        for prof, p in sorted(k["profiles"].items()):
            out.append(observation(kid, prof, p.get("status", "gated"), p.get("gates", {}),
                                   {"runner": doc.get("runner")}))
    return out


def from_aot(docs: Mapping[str, Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Settings ``<target> w<num_warps>`` from ahead-of-time results (lethe.mamba.triton_aot/1), one document
    per shape/dtype label: RES-02 per compiled kernel, the verdict RES-02 would give on that target (fail when
    a launch limit is violated; na when the compile failed for a reason other than resources, as the gate does)."""
    settings: dict[str, list[dict[str, Any]]] = {}
    for label, doc in sorted(docs.items()):
        for r in doc["rows"]:
            setting = f"{r['target']} w{r['num_warps']}"
            if not r.get("compiles"):
                gate = {"status": "na", "reason": f"compile failed: {r.get('error')}"}
            elif r.get("violations"):
                gate = {"status": "fail", "reason": "; ".join(map(str, r["violations"]))}
            else:
                gate = {"status": "pass",
                        "reason": f"{r.get('registers')} registers, {r.get('shared_bytes')} B shared, "
                                  f"{r.get('spill_bytes')} B spilled"}
            settings.setdefault(setting, []).append(
                observation(f"{r['op']} ({r['kernel']})", label, "gated", {"RES-02": gate}, {}))
    return settings


#: The launch search's own check (float64 oracle at a small shape, then the default config at each shape).
LAUNCH_CHECK = "launch-check"


def from_launch_search(doc: Mapping[str, Any], kernel: str = "C1 selective scan forward") -> dict[str, list]:
    """Settings = launch configurations from the launch search (lethe.mamba.launch_search/1, the current run
    of a lethe.results document): per shape, whether the configuration passed the search's correctness check
    (``ok``), disagreed with the oracle or the default (``mismatch``: fail) or could not run (``error``)."""
    result = doc["runs"][-1]["result"] if "runs" in doc else doc
    status = {"ok": "pass", "mismatch": "fail", "error": "error"}
    settings: dict[str, list[dict[str, Any]]] = {}
    for r in result["rows"]:
        s = r["shape"]
        profile = f"b{s['batch']}_l{s['seq_len']}_d{s['d_model']}_n{s['n_state']}"
        gate = {"status": status.get(r["status"], "error"), "reason": r.get("reason") or ""}
        settings.setdefault(r["config"]["name"], []).append(
            observation(kernel, profile, "gated", {LAUNCH_CHECK: gate}, {"device": result.get("device")}))
    return settings


def _json(text: Any) -> dict:
    if isinstance(text, dict):
        return text
    try:
        return json.loads(text or "{}")
    except (TypeError, ValueError):
        return {}


def classify_change(per_setting: Mapping[str, Mapping[str, Any]]) -> str:
    """The class (a key of ``CHANGE_CLASSES``) of one gate whose verdict differs between settings.

    Tried in order: na somewhere (the gate judged nothing there, so there is no verdict to disagree with);
    error somewhere; a probe failing in one setting absent from another's probes (different plans judged
    different inputs); a failing setting whose err/tol does not exceed 1 (what failed there was a property, so
    margins cannot explain the change); every recorded margin in the ``BORDERLINE`` band (the kernel sits at
    the tolerance); some margin recorded far from 1 (the numbers moved); no margin at all (a property gate)."""
    statuses = {v["status"] for v in per_setting.values()}
    if "na" in statuses:
        return "not_applicable"
    if "error" in statuses:
        return "harness_error"
    ran = [set(v["probes"]) for v in per_setting.values() if v.get("probes")]
    failing = {p for v in per_setting.values() for p in v.get("failing_probes", [])}
    if ran and len(ran) == len(per_setting) and any(failing - r for r in ran):
        return "probe_not_run"
    if any(v["status"] == "fail" and v.get("margin") is not None and v["margin"] <= 1
           for v in per_setting.values()):
        return "property_check"
    margins = [v["margin"] for v in per_setting.values() if v.get("margin") is not None]
    if margins and all(BORDERLINE[0] <= m <= BORDERLINE[1] for m in margins):
        return "borderline"
    if margins:
        return "margin_moves"
    return "no_margin"


def context_differences(contexts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What the verifier itself did differently between settings (its code digest, tolerance constants, probe
    plan), in words: a verdict change under a different verifier is not only a machine's doing."""
    out = []
    for field in ("verifier_code", "plan"):
        vals = {s: c.get(field) for s, c in contexts.items() if c.get(field) is not None}
        if len(set(vals.values())) > 1:
            out.append(f"{field} " + " vs ".join(f"{v} ({s})" for s, v in vals.items()))
    tols = {s: c.get("tolerance") or {} for s, c in contexts.items() if c.get("tolerance")}
    keys = sorted({k for t in tols.values() for k in t})
    for k in keys:
        vals = {s: t.get(k) for s, t in tols.items()}
        if len(set(map(str, vals.values()))) > 1:
            out.append(f"tolerance {k} " + " vs ".join(f"{v} ({s})" for s, v in vals.items()))
    return out


def compare(settings: Mapping[str, Iterable[Mapping[str, Any]]]) -> dict[str, Any]:
    """Line up the observations of two or more settings by (kernel, profile): per pair, each gate's verdict in
    every setting, the gates whose verdict changes (with reason, margin and class), and what the verifier did
    differently; pairs not observed in every setting are listed under ``missing``, never compared."""
    names = list(settings)
    if len(names) < 2:
        raise ValueError("compare needs at least two settings")
    by_key: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    for s in names:
        for o in settings[s]:
            by_key.setdefault((o["kernel"], o["profile"]), {})[s] = o
    pairs, missing = [], []
    for (kernel, profile), seen in sorted(by_key.items()):
        if len(seen) < len(names):
            missing.append({"kernel": kernel, "profile": profile, "in": sorted(seen),
                            "absent_from": [s for s in names if s not in seen]})
            continue
        gates = sorted({g for o in seen.values() for g in o["gates"]})
        verdicts, changed = {}, []
        for g in gates:
            per = {s: seen[s]["gates"].get(g, {"status": "na", "reason": "gate not recorded", "margin": None})
                   for s in names}
            verdicts[g] = {s: v["status"] for s, v in per.items()}
            if len({v["status"] for v in per.values()}) > 1:
                changed.append({"gate": g, "class": classify_change(per), "settings": per})
        pairs.append({"kernel": kernel, "profile": profile, "status": {s: seen[s]["status"] for s in names},
                      "verdicts": verdicts, "changed": changed,
                      "verifier_differs": context_differences({s: seen[s]["context"] for s in names})})
    return {"schema": SCHEMA, "settings": names, "pairs": pairs, "missing": missing, "summary": summarise(pairs)}


def summarise(pairs: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts over compared pairs: how many gate verdicts were compared and changed, by gate and by class."""
    changes = [c for p in pairs for c in p["changed"]]
    return {"pairs": len(pairs), "gate_verdicts": sum(len(p["verdicts"]) for p in pairs),
            "changed": len(changes), "pairs_changed": sum(1 for p in pairs if p["changed"]),
            "by_gate": dict(sorted(Counter(c["gate"] for c in changes).items())),
            "by_class": dict(sorted(Counter(c["class"] for c in changes).items())),
            "pairs_verifier_differs": sum(1 for p in pairs if p["verifier_differs"])}


def load(path: str, key: str = "id") -> list[dict[str, Any]]:
    """Observations from one file: verdict rows (parquet) or a Mamba positive-control result (JSON)."""
    if path.endswith(".parquet"):
        from lethe.verifier.records import read_rows

        return from_rows(read_rows(path), key=key)
    with open(path) as f:
        doc = json.load(f)
    if str(doc.get("schema", "")).startswith("lethe.mamba.positive_control/"):
        return from_mamba_positive_control(doc)
    raise ValueError(f"{path}: not verdict rows (.parquet) nor a lethe.mamba.positive_control result")


def add_subcommand(sub) -> None:
    """``lethe portability A B [...] [--out]``: compare two or more rows files / results."""
    p = sub.add_parser("portability", help="compare the verdicts of the same kernels in two or more settings "
                                           "(machines, targets, configurations) and list the gates that change")
    p.add_argument("files", nargs="+", help="verdict rows (.parquet) or Mamba positive-control results (.json)")
    p.add_argument("--labels", default=None, help="comma-separated setting names (default: the file paths)")
    p.add_argument("--key", choices=["id", "source"], default="id",
                   help="match kernels by row id or by candidate+reference source hash (default id)")
    p.add_argument("--out", default=None, help="write the comparison as JSON here")
    p.set_defaults(func=_cli)


def _cli(a) -> int:
    labels = a.labels.split(",") if a.labels else a.files
    if len(a.files) < 2 or len(labels) != len(a.files):
        print("lethe portability: give two or more files and one label per file", flush=True)
        return 2
    try:
        doc = compare({lab: load(f, a.key) for lab, f in zip(labels, a.files, strict=True)})
    except (OSError, ValueError) as exc:
        print(f"lethe portability: {exc}")
        return 2
    s = doc["summary"]
    print(f"{s['pairs']} kernel x profile pairs compared, {s['changed']} of {s['gate_verdicts']} gate verdicts "
          f"change; {len(doc['missing'])} pairs not in every setting")
    for p in doc["pairs"]:
        for c in p["changed"]:
            sides = "; ".join(f"{k}: {v['status']}" + (f" (err/tol {v['margin']:.3g})" if v["margin"] is not None
                                                          else "") for k, v in c["settings"].items())
            print(f"  {p['kernel']} [{p['profile']}] {c['gate']}: {sides} -> {c['class']}")
    if a.out:
        from pathlib import Path

        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return 0


#: How each kind of committed result becomes settings (name -> observations); ``spec`` is one comparison of
#: config ``portability.comparisons``.
def _settings(spec: Mapping[str, Any], root: str) -> dict[str, list[dict[str, Any]]]:
    import os

    def path(p: str) -> str:
        return os.path.join(root, p)

    kind = spec["kind"]
    if kind == "rows":
        from lethe.verifier.records import read_rows

        return {name: from_rows([r for r in read_rows(path(f)) if r["profile"] in spec.get("profiles", [r["profile"]])],
                                key=spec.get("key", "id"))
                for name, f in spec["settings"].items()}
    if kind == "mamba_positive_control":
        return {name: from_mamba_positive_control(json.loads(open(path(f)).read()))
                for name, f in spec["settings"].items()}
    if kind == "aot":
        return from_aot({label: json.loads(open(path(f)).read()) for label, f in spec["files"].items()})
    if kind == "launch_search":
        return from_launch_search(json.loads(open(path(spec["file"])).read()))
    raise ValueError(f"unknown comparison kind {kind!r}")


def _inputs(spec: Mapping[str, Any]) -> list[str]:
    return sorted(list(spec.get("settings", {}).values()) + list(spec.get("files", {}).values())
                  + ([spec["file"]] if "file" in spec else []))


def input_files(comparisons: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every committed file the report reads (for the render rule's inputs)."""
    return sorted({f for spec in comparisons for f in _inputs(spec)})


def build_report(comparisons: Iterable[Mapping[str, Any]], root: str = ".") -> dict[str, Any]:
    """The portability report: one :func:`compare` per configured comparison, with the SHA-256 of every input
    file (so the report says exactly what it was computed from; deterministic, no time or host)."""
    import hashlib
    import os

    out = {"schema": "lethe.portability_report/1", "classes": CHANGE_CLASSES, "borderline": list(BORDERLINE),
           "comparisons": []}
    for spec in comparisons:
        doc = compare(_settings(spec, root))
        doc.update(name=spec["name"], what=spec.get("what", ""), note=spec.get("note", ""),
                   inputs={f: hashlib.sha256(open(os.path.join(root, f), "rb").read()).hexdigest()
                           for f in _inputs(spec)})
        out["comparisons"].append(doc)
    return out


#: Characters of a recorded reason shown in the changes table (the report keeps it whole).
REASON_CHARS = 110


def _sides(settings: Mapping[str, Mapping[str, Any]]) -> str:
    return "; ".join(f"{s}: {v['status']}" + (f" ({v['margin']:.3g})" if v.get("margin") is not None else "")
                     for s, v in settings.items())


def render(report: Mapping[str, Any], md: str, tex: str, md_changes: str, tex_changes: str) -> None:
    """Two tables: per comparison, what was compared and how many gate verdicts change (by class), and what
    could not be compared; then every changed gate with its verdict and err/tol in each setting."""
    from lethe.render.tables import render_table

    recs, changes = [], []
    for c in report["comparisons"]:
        s = c["summary"]
        absent: dict[str, int] = {}
        for m in c["missing"]:
            for side in m["absent_from"]:
                absent[side] = absent.get(side, 0) + 1
        recs.append({"name": c["name"], "what": c["what"], "settings": len(c["settings"]), "pairs": s["pairs"],
                     "verdicts": s["gate_verdicts"], "changed": s["changed"],
                     "gates": ", ".join(f"{g} {n}" for g, n in s["by_gate"].items()) or "–",
                     "classes": ", ".join(f"{k} {n}" for k, n in s["by_class"].items()) or "–",
                     "absent": ", ".join(f"{n} not in {side}" for side, n in sorted(absent.items())) or "–",
                     "verifier": f"{s['pairs_verifier_differs']} of {s['pairs']}" if s["pairs"] else "–"})
        for p in c["pairs"]:
            for ch in p["changed"]:
                changes.append({"name": c["name"], "kernel": p["kernel"], "profile": p["profile"], "gate": ch["gate"],
                                "sides": _sides(ch["settings"]), "class": ch["class"],
                                "reason": "; ".join(f"{s}: {v['reason'][:REASON_CHARS]}"
                                                    for s, v in ch["settings"].items()
                                                    if v["status"] != "pass" and v["reason"]) or "–"})
    notes = [f"{k}: {v}." for k, v in report["classes"].items()]
    notes.append("verifier differs: pairs whose two rows were graded by different verifier code, probe plan or "
                 "tolerance constants (row environment); a change there is not only the machine's doing.")
    notes += [f"{c['name']}: {c['note']}" for c in report["comparisons"] if c.get("note")]
    render_table(recs, [("name", "comparison"), ("what", "settings compared"), ("settings", "settings"),
                        ("pairs", "kernel x profile"), ("verdicts", "gate verdicts"), ("changed", "changed"),
                        ("gates", "changed by gate"), ("classes", "changed by class"),
                        ("absent", "not compared"), ("verifier", "verifier differs")],
                 "Does the verdict depend on the machine, the compile target or the launch configuration?",
                 "tab:portability", md, tex, notes=notes)
    render_table(changes, [("name", "comparison"), ("kernel", "kernel"), ("profile", "profile"), ("gate", "gate"),
                           ("sides", "verdict (err/tol) per setting"), ("class", "class"),
                           ("reason", "recorded reason where not pass")],
                 "Every gate verdict that changes between settings", "tab:portability-changes",
                 md_changes, tex_changes,
                 notes=["err/tol: the gate's largest error over tolerance; > 1 is out of contract. Kernels matched by "
                        "source hash are named <candidate sha256 prefix>:<reference sha256 prefix>."])


def main(argv: list[str] | None = None) -> int:
    """``python -m lethe.audit.portability --config config/config.yaml --out results/portability/report.json``:
    build the report from the committed results the config names, with provenance beside it."""
    import argparse
    import sys
    from pathlib import Path

    import yaml

    from lethe import provenance

    ap = argparse.ArgumentParser(prog="python -m lethe.audit.portability", description=main.__doc__)
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--out", default="results/portability/report.json")
    a = ap.parse_args(argv)
    comparisons = yaml.safe_load(Path(a.config).read_text())["portability"]["comparisons"]
    doc = build_report(comparisons)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    provenance.write(Path(a.out).with_name("provenance.json"),
                     command="python -m lethe.audit.portability " + " ".join(sys.argv[1:] if argv is None else argv),
                     device="cpu",
                     inputs=input_files(comparisons))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
