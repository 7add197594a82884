"""The run-time environment a job needs: device and precision, RNG, memory, timing and
provenance, one concern a module."""
