"""Threshold calibration of the battery's thresholded gates (honest floor, trip point, defect onset, margins)."""
