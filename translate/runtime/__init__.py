"""The run-time environment a job needs, one concern a module: :mod:`.device` (device,
precision, eval mode), :mod:`.rng` (seeds, RNG state, deterministic kernels), :mod:`.memory`
(the allocator, peak memory), :mod:`.timing` (timed calls, rotated order) and
:mod:`.provenance` (what produced a result: code, torch, CPU, command line)."""
