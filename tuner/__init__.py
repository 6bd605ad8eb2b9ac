"""sglang-tuner: finds the fastest SGLang launch configuration for a model on given GPUs.

Packages: ``tuner`` (the driver: space, rendering, study loop, export), ``workers`` (what runs next
to the GPUs: server lifecycle, benchmark, gate, simulated engine), ``db`` (the SQLite store).
"""

__version__ = "0.1.0"
