"""Stratified hand-audit of the disputed cell: sample selection, the label file format, the summary table."""
