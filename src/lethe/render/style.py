"""One matplotlib look for every figure, and byte-deterministic PNG/PDF output.

Why each setting is here:
- Okabe-Ito colours stay distinguishable under the common colour-vision deficiencies and in greyscale print.
- DejaVu Sans ships inside matplotlib, so the same glyphs (hence the same bytes) come out on every machine;
  a system font would make the PDF depend on what the host has installed.
- PNG ``Software`` and PDF ``CreationDate``/``Producer`` would stamp the matplotlib version and the time;
  ``svg.hashsalt`` fixes the ids an SVG backend would otherwise randomise; dpi is fixed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless and deterministic; must precede pyplot

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import font_manager  # noqa: E402


def _pin_bundled_dejavu() -> None:
    """Make "DejaVu Sans" (and the rest of the DejaVu family) mean the files inside matplotlib.

    matplotlib's font list (cached in ``~/.cache/matplotlib``) keeps a system copy of DejaVu when the host has one,
    and which copy a lookup finds depends on how that cache was built: with the host's DejaVu the PDFs embed other
    glyph tables and differ byte for byte (seen on the CI machine class). Dropping every DejaVu entry and
    registering matplotlib's own files makes the choice independent of the host and of the cache."""
    ttf = Path(matplotlib.get_data_path(), "fonts", "ttf")
    bundled = sorted(ttf.glob("DejaVu*.ttf"))
    if not bundled:
        return
    fm = font_manager.fontManager
    fm.ttflist = [f for f in fm.ttflist if not f.name.startswith("DejaVu")]
    for path in bundled:
        fm.addfont(str(path))
    cached = getattr(font_manager.FontManager, "_findfont_cached", None)
    if cached is not None and hasattr(cached, "cache_clear"):
        cached.cache_clear()


_pin_bundled_dejavu()

#: Okabe & Ito (2008) colour-blind-safe palette, in their order (black last, for reference lines).
OKABE_ITO = {
    "orange": "#E69F00",
    "sky_blue": "#56B4E9",
    "bluish_green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish_purple": "#CC79A7",
    "black": "#000000",
}
PALETTE = list(OKABE_ITO.values())

DPI = 200
#: Caption fragment every figure drawn from the authors' released records carries.
PUBLISHED_TAG = "published figures (paper authors' release)"

RC = {
    "font.family": "DejaVu Sans",
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "legend.frameon": False,
    "axes.prop_cycle": matplotlib.cycler(color=PALETTE),
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.grid.axis": "y",
    "grid.color": "#DDDDDD",
    "grid.linewidth": 0.6,
    "axes.axisbelow": True,
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
    "savefig.bbox": "standard",  # "tight" re-measures text; keep the canvas size fixed instead
    "figure.constrained_layout.use": True,
    "svg.hashsalt": "lethe",
    "svg.fonttype": "path",
    "pdf.fonttype": 42,  # embedded TrueType: searchable text, stable subsetting
    "path.simplify": False,
    "image.cmap": "cividis",  # perceptually uniform and colour-blind-safe
}

PNG_METADATA = {"Software": None}
PDF_METADATA = {"CreationDate": None, "Producer": None}


@contextlib.contextmanager
def style() -> Iterator[None]:
    """Apply the house style for the duration of a ``with`` block (restores the previous rcParams after)."""
    with matplotlib.rc_context(RC):
        yield


def new_figure(width_in: float = 6.0, height_in: float = 3.2, **subplots_kw):
    """A figure and axes in the house style (call inside :func:`style` or after :func:`apply_style`)."""
    return plt.subplots(figsize=(width_in, height_in), **subplots_kw)


def apply_style() -> None:
    """Apply the house style globally (for scripts that draw many figures)."""
    matplotlib.rcParams.update(RC)


def save_figure(fig, stem: str, outdir: str | os.PathLike[str] = "figures") -> tuple[Path, Path]:
    """Write ``<outdir>/<stem>.png`` and ``<outdir>/<stem>.pdf`` without timestamps or version stamps, close it.

    Returns the two paths. Rendering the same figure twice gives identical bytes (tested in
    ``tests/render/test_determinism.py``).
    """
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    png, pdf = outdir / f"{stem}.png", outdir / f"{stem}.pdf"
    # SOURCE_DATE_EPOCH would be used by the PDF backend if CreationDate were left unset; we remove it outright.
    with matplotlib.rc_context({"svg.hashsalt": "lethe"}):
        fig.savefig(png, format="png", dpi=DPI, metadata=PNG_METADATA)
        fig.savefig(pdf, format="pdf", dpi=DPI, metadata=PDF_METADATA)
    plt.close(fig)
    return png, pdf
