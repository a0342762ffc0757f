"""Benchmarks: each prints JSON on stdout (see DESIGN.md, Testing)."""
