"""Every GPU experiment is a Snakemake compute rule: a driver under experiments/ that touches CUDA is the command
of at least one rule in a workflow/rules/<stage>_compute.smk, and that rule asks for the GPU; fla's wheel is
installed in one place only."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMPUTE = sorted((ROOT / "workflow" / "rules").glob("*_compute.smk"))


def _rules() -> dict[str, str]:
    """rule name -> its text, over every compute file."""
    out = {}
    for f in COMPUTE:
        parts = re.split(r"^\s*rule (\w+):", f.read_text(), flags=re.M)
        out.update({parts[i]: parts[i + 1] for i in range(1, len(parts), 2)})
    return out


# Code that runs on a CUDA device: torch.cuda, .cuda(), a "cuda" device string or cuda:N. A key that merely
# contains the word (a provenance field such as cuda_runtime) is not GPU use.
_USES_CUDA = re.compile(r"torch\.cuda|\.cuda\(|[\"']cuda[\"']|cuda:\d")


def _gpu_drivers() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "experiments").rglob("*.py")
                  if _USES_CUDA.search(p.read_text()))


def test_every_gpu_driver_has_a_compute_rule_that_asks_for_the_gpu():
    """A driver that uses CUDA and no rule naming it (or a rule naming it without resources gpu=1) fails."""
    rules = _rules()
    drivers = _gpu_drivers()
    assert drivers
    for d in drivers:
        mine = [n for n, text in rules.items() if d in text]
        assert mine, f"{d} has no compute rule"
        assert any("gpu=1" in rules[n] for n in mine), f"{d}: no rule of {mine} asks for the GPU"


def test_the_fla_wheel_is_installed_in_one_place():
    """Only workflow/scripts/with_fla.sh installs the fla wheel; every rule that needs fla goes through it."""
    hits = [str(p.relative_to(ROOT)) for p in [*ROOT.glob("experiments/**/*"), *ROOT.glob("workflow/**/*")]
            if p.is_file() and "--target" in p.read_text(errors="ignore") and "fla_core" in p.read_text(errors="ignore")]
    assert hits == ["workflow/scripts/with_fla.sh"]
    for name, text in _rules().items():
        if "fla_compare.py" in text or "fla640/run.py" in text or "--fla only" in text:
            assert "with_fla.sh" in text, name
