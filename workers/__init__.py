"""What runs next to the GPUs: server lifecycle, benchmark client, correctness gate, GPU-group
actor and the simulated SGLang engine. Everything here returns frozen dataclasses from
:mod:`core.types`; nothing here writes the database."""
