"""Benchmarks: attention cost (with the roofline per score function), training throughput, the GPU check."""
