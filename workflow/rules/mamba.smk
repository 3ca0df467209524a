# Render rules of the mamba stage. The ahead-of-time tables of the six kernels are written by
# experiments/mamba/triton_aot.py next to their results (results/mamba/aot/*/triton_aot.md, compiled on the CPU,
# never executed); the H200 benchmark (mamba_compute.smk) has no committed result yet, so nothing is rendered here.
