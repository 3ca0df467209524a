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
