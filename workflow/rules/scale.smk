# The scale run (issue 27; docs/scale.md). No render rule yet: the curve and table are rendered once a run's
# result is committed (results/scale/), and this file then registers them in RENDER_TARGETS. The compute rules
# are in scale_compute.smk.
