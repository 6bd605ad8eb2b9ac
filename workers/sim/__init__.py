"""The simulated SGLang engine: a real HTTP server launched like ``sglang.launch_server`` whose
performance and failures come from a scenario file (docs/simulator.md).

``python -m workers.sim <SGLang flags>`` with ``SGLANG_SIM_SCENARIO=<file>`` (or
``--sim-scenario <file>``). :func:`workers.sim.scenario.evaluate` is the same model offline.
"""
