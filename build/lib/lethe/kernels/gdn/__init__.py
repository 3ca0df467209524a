"""The gated-linear-recurrence (GDN) family: float64 reference, chunked WY form, Triton and native paths behind one
autograd entry, :func:`chunk_family` (docs/gdn.md, docs/native.md)."""


def __getattr__(name):
    # lazy, so that importing a submodule (the options, the reference) does not load torch's autograd glue
    if name in ("chunk_family", "MEMBERS", "BACKENDS"):
        from . import autograd

        return getattr(autograd, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
