"""Fetch one pinned corpus file into the corpora cache (fails at once, with instructions, when offline)."""

from pathlib import Path

from lethe.corpora.fetch import PINS, fetch
from lethe.corpora.leaderboard import DATA as LEADERBOARD_DATA
from lethe.corpora.leaderboard import RAW as LEADERBOARD_RAW

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

target = Path(snakemake.output[0])
pins = [*PINS.values(), LEADERBOARD_RAW, LEADERBOARD_DATA]
pin = next((p for p in pins if p.path(snakemake.params.cache_dir) == target), None)
if pin is None:
    raise SystemExit(f"no pin for {target} (known datasets: {[p.dataset for p in pins]})")
fetch(pin, snakemake.params.cache_dir)
