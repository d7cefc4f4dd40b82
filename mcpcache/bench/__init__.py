"""Measurement helpers shared by `benchmarks/` and `mcpcache bench`: what they count must be counted one way."""
