"""The standalone half of a repro: everything a repro directory needs, in torch and the standard library only.

``lethe repro`` copies this file verbatim into the directory it writes (as ``repro_harness.py``), so the
generated ``test_repro.py`` runs on a machine where only torch and pytest are installed. Lethe itself imports
the same module to write the tensor file, so the writer and the reader are one piece of code. Because it must
run without Lethe, it imports nothing from it: the few helpers that restate verifier code (the dtype codes, the
element rule, the tensor-to-bytes conversion) are restated here on purpose, and the tests check they agree.

Tensor file: the safetensors layout (an 8-byte little-endian header length, a JSON header naming each
tensor's dtype, shape and byte range, then the raw little-endian bytes), written and read here with torch
alone. It holds no pickle, so loading it executes nothing; the ``safetensors`` package can read it too.

Comparison (:func:`compare`): the verifier's element rule (``lethe.verifier.gates.compare``) restated in
torch: the float64 reference is rounded to the contract dtype, non-finite values are compared by class (NaN,
+Inf, -Inf), finite ones against the stored tolerance, and where a flush-to-zero reference is stored it is
accepted elementwise as an alternative. ``tests/repro/test_standalone.py`` checks that the two agree.
"""

from __future__ import annotations

import importlib.util
import json
import struct
import sys
from pathlib import Path

import torch

_CODES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
          torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
          torch.bool: "BOOL"}
_DTYPES = {v: k for k, v in _CODES.items()}
DTYPES = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8,
          "uint8": torch.uint8, "bool": torch.bool}
# Integer views of the float dtypes, for bitwise equality (NaN payloads and signed zeros included).
_BITS = {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16,
         torch.bfloat16: torch.int16}


def write_tensors(path: str | Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> Path:
    """Write ``tensors`` (CPU, any dtype in ``_CODES``) and string ``metadata`` in the safetensors layout,
    names sorted so that the same tensors give the same bytes."""
    header: dict = {"__metadata__": dict(metadata)}
    blobs, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _CODES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the format aligns the data to 8 bytes
    path = Path(path)
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))
    return path


def read_tensors(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors and metadata of a file written by :func:`write_tensors` (or any safetensors file)."""
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    out = {}
    for name, h in header.items():
        lo, hi = h["data_offsets"]
        dtype = _DTYPES[h["dtype"]]
        buf = bytearray(body[lo:hi])
        flat = torch.frombuffer(buf, dtype=dtype) if buf else torch.empty(0, dtype=dtype)
        out[name] = flat.reshape(h["shape"])
    return out, meta


def flatten(out) -> list[torch.Tensor]:
    """Every tensor a forward returned, depth first; Python numbers become 0-d float64 tensors (the verifier's
    rule, lethe.verifier.reference.flatten)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flatten(o)]
    if isinstance(out, (int, float)) and not isinstance(out, bool):
        return [torch.tensor(out, dtype=torch.float64)]
    return []


def compare(ref: torch.Tensor, cand: torch.Tensor, dtype: str, tol: torch.Tensor, *, skip_nan: bool = False,
            alt_ref: torch.Tensor | None = None) -> dict:
    """Elementwise contract check of ``cand`` against the float64 ``ref``; see the module docstring.

    Returns ``{"ok", "n", "n_bad", "value", "new_nonfinite", "lost_nonfinite", "wrong_nonfinite",
    "max_err_over_tol", "first_bad"}``: ``value`` counts finite elements beyond the tolerance, the three
    non-finite counts where only one side is finite or the classes differ. ``skip_nan`` (a profile that allows
    NaN non-propagation) leaves the positions where the rounded reference is NaN ungraded."""
    if tuple(ref.shape) != tuple(cand.shape):
        return {"ok": False, "why": "shape", "ref_shape": list(ref.shape), "cand_shape": list(cand.shape)}
    if not ref.is_floating_point():
        bad = ref.cpu() != cand.cpu()
        return {"ok": not bool(bad.any()), "n": ref.numel(), "n_bad": int(bad.sum()), "value": int(bad.sum()),
                "new_nonfinite": 0, "lost_nonfinite": 0, "wrong_nonfinite": 0, "max_err_over_tol": 0.0,
                "first_bad": torch.nonzero(bad)[:5].tolist()}
    r = ref.detach().cpu().to(torch.float64)
    c = cand.detach().cpu().to(torch.float64)
    rc = r if dtype == "float64" else r.to(DTYPES[dtype]).to(torch.float64)
    rnan, cnan, rinf, cinf = torch.isnan(rc), torch.isnan(c), torch.isinf(rc), torch.isinf(c)
    rfin, cfin = ~(rnan | rinf), ~(cnan | cinf)
    skip = rnan if skip_nan else torch.zeros_like(rnan)
    agree = (rnan & cnan) | (rinf & cinf & (torch.sign(rc) == torch.sign(c)))
    new_nf = rfin & ~cfin & ~skip
    lost_nf = ~rfin & cfin & ~skip
    wrong_nf = ~rfin & ~cfin & ~agree & ~skip
    both = rfin & cfin & ~skip
    t = torch.broadcast_to(tol.detach().cpu().to(torch.float64), r.shape)
    err = torch.where(both, (c - r).abs(), torch.zeros_like(r))
    bad_val = both & (err > t)
    ratio = torch.where(both, err / torch.clamp(t, min=1e-300), torch.zeros_like(r))
    if alt_ref is not None:
        a = alt_ref.detach().cpu().to(torch.float64)
        alt_err = (c - a).abs()
        bad_val &= ~(alt_err <= t)
        ratio = torch.minimum(ratio, torch.where(both, alt_err / torch.clamp(t, min=1e-300), torch.zeros_like(r)))
    bad = bad_val | new_nf | lost_nf | wrong_nf
    return {"ok": not bool(bad.any()), "n": r.numel(), "n_bad": int(bad.sum()), "value": int(bad_val.sum()),
            "new_nonfinite": int(new_nf.sum()), "lost_nonfinite": int(lost_nf.sum()),
            "wrong_nonfinite": int(wrong_nf.sum()),
            "max_err_over_tol": float(ratio.max()) if ratio.numel() else 0.0,
            "first_bad": torch.nonzero(bad)[:5].tolist()}


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape and the same bits in every element (bfloat16 compared through its exact float32 widening,
    which is how the verifier stores it)."""
    a, b = a.detach().cpu(), b.detach().cpu()
    if a.dtype == torch.bfloat16:
        a = a.float()
    if b.dtype == torch.bfloat16:
        b = b.float()
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    bits = _BITS.get(a.dtype)
    if bits is None:
        return torch.equal(a, b)
    return torch.equal(a.contiguous().view(bits), b.contiguous().view(bits))


def load_module(path: str | Path, name: str):
    """Import a source file as a fresh module (from its file, so Triton's @jit can read its source)."""
    spec = importlib.util.spec_from_file_location(name, str(path))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _forward_backward(model, xs: list, action: str, differentiable, upstream, *, with_params: bool):
    """One forward (``action`` "forward", no autograd) or a forward and a backward from the stored upstream
    gradients: the outputs, and what the checks compare keyed as in ``spec["checks"]`` (``ref<k>`` outputs,
    ``gin<j>`` input gradients, ``gpar/<name>`` parameter gradients when ``with_params``). The candidate and the
    reference side differ only in which outputs are differentiated and in the upstream gradients' dtype."""
    got: dict[str, torch.Tensor] = {}
    if action == "backward":
        for x in xs:
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                x.requires_grad_(True)
        outs = flatten(model(*xs))
        fouts = [o for o in outs if differentiable(o)]
        model.zero_grad(set_to_none=True)
        torch.autograd.backward(fouts, upstream(fouts))
        for j, x in enumerate(xs):
            if isinstance(x, torch.Tensor) and x.requires_grad:
                got[f"gin{j}"] = x.grad if x.grad is not None else torch.zeros_like(x)
        if with_params:
            for name, prm in model.named_parameters():
                if prm.grad is not None:
                    got[f"gpar/{name}"] = prm.grad
    else:
        with torch.no_grad():
            outs = flatten(model(*xs))
    for k, o in enumerate(outs):
        got[f"ref{k}"] = o.detach()
    return outs, got


class Case:
    """One failing probe as stored in the tensor file: its description (``case`` metadata) and tensors."""

    def __init__(self, directory: str | Path, tensor_file: str = "inputs.safetensors"):
        self.dir = Path(directory)
        self.tensors, meta = read_tensors(self.dir / tensor_file)
        self.spec = json.loads(meta["case"])
        self.device = self.spec["device"]
        self.dtype = self.spec["dtype"]

    def _values(self, specs: list[dict]) -> list:
        return [self.tensors[s["key"]].clone() if s["t"] == "tensor" else s["v"] for s in specs]

    def inputs(self) -> list:
        return [x.to(DTYPES[s["dtype"]]) if s["t"] == "tensor" else x
                for x, s in zip(self._values(self.spec["inputs"]), self.spec["inputs"], strict=True)]

    def candidate_outputs(self, module) -> dict[str, torch.Tensor]:
        """Run ``module.ModelNew`` the way the verifier's candidate process does (lethe.verifier.worker): built
        from the stored init inputs under the seed, the reference's weights loaded when the state-dict shapes
        match, converted to the probe dtype, then one forward (or forward + backward with the stored upstream
        gradients). Returns what the checks compare, keyed as in ``spec["checks"]``."""
        torch.set_num_threads(1)
        init = self._values(self.spec["init"])
        torch.manual_seed(int(self.spec["seed"]))
        model = module.ModelNew(*init)
        sd = model.state_dict()
        ref_sd = {k[len("sd/"):]: v for k, v in self.tensors.items() if k.startswith("sd/")}
        copied = bool(sd) and {k: tuple(v.shape) for k, v in sd.items()} == {k: tuple(v.shape) for k, v in ref_sd.items()}
        if copied:
            model.load_state_dict(ref_sd)
        model.to(self.device)
        if self.dtype != "float32":
            model.to(DTYPES[self.dtype])
        xs = [x.to(self.device) if isinstance(x, torch.Tensor) else x for x in self.inputs()]
        outs, got = _forward_backward(
            model, xs, self.spec["action"], lambda o: o.is_floating_point(),
            lambda fouts: [self.tensors[f"up/{k}"].to(o.dtype).to(o.device) for k, o in enumerate(fouts)],
            with_params=copied)
        got["n_out"] = torch.tensor(len(outs))
        return got

    def reference_outputs(self, module) -> dict[str, torch.Tensor]:
        """The float64 reference on the stored inputs (weights rounded through the probe dtype, as the
        verifier's reference does), keyed like :meth:`candidate_outputs`."""
        torch.set_num_threads(1)
        init = self._values(self.spec["init"])
        torch.manual_seed(int(self.spec["seed"]))
        model = module.Model(*init).double()
        state = {k[len("sd/"):]: v for k, v in self.tensors.items() if k.startswith("sd/")}
        low = DTYPES.get(self.dtype, torch.float32)
        model.load_state_dict({k: (v.to(torch.float64).to(low).to(torch.float64) if self.dtype != "float32"
                                   else v.to(torch.float64)) if v.is_floating_point() else v
                               for k, v in state.items()})
        xs = [x.to(torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
              for x in self.inputs()]
        _, got = _forward_backward(
            model, xs, self.spec["action"], lambda o: o.is_floating_point() and o.requires_grad,
            lambda fouts: [self.tensors[f"up/{k}"].to(torch.float64) for k in range(len(fouts))],
            with_params=True)
        return got

    def check(self, got: dict[str, torch.Tensor]) -> list[tuple[str, dict]]:
        """Every stored check of the probe against ``got``: (what, comparison) pairs."""
        out = []
        for chk in self.spec["checks"]:
            cand = got.get(chk["key"])
            if cand is None:
                if chk["key"].startswith("gin"):  # a missing .grad is a zero gradient (the verifier's rule)
                    cand = torch.zeros_like(self.tensors[f"expected/{chk['key']}"])
                else:
                    out.append((chk["key"], {"ok": False, "why": "missing"}))
                    continue
            alt = self.tensors.get(f"alt/{chk['key']}")
            out.append((chk["key"], compare(self.tensors[f"expected/{chk['key']}"], cand, self.dtype,
                                            self.tensors[f"tolerance/{chk['key']}"], skip_nan=chk["skip_nan"],
                                            alt_ref=alt)))
        return out
