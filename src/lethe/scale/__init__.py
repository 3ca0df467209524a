"""The scale run (issue 27): a byte-level language model of residual blocks whose mixers run through our own
kernels (the Mamba-1 fused block C5/C6, or a gated-delta-rule layer through ``chunk_family``), its data, its
training loop and its dispatch proof (docs/scale.md).

* :mod:`.model`: :class:`ModelConfig`, the named sizes (``CONFIGS``, incl. ``"1b"``), :class:`ByteLM`,
  :func:`count_parameters`, :func:`analytic_parameters` (meta device, nothing allocated);
* :mod:`.dispatch`: what the forward and backward called (:class:`DispatchLog`);
* :mod:`.data`: the PTB-XL pin (fails offline with a hand-supply message) and the Python standard library's
  sources as a byte corpus with a manifest hash and a split by file hash;
* :mod:`.train`: :func:`train` (AdamW, clipping, bf16 autocast or fp32, atomic checkpoints, exact resume, JSONL
  log, validation, a non-finite stop) and :func:`compare_paths` (torch reference path vs ours).
"""
