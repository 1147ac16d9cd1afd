"""glow_like's own compiled kernels (numba, imported through ``lowerkit.backend.cpu.jit.load``
at bind time, never at plugin import): the fused element-wise chain."""

# Compiled in with the chain kernel: its numba cache follows this module's source too
# (``lowerkit.backend.cpu.jit.cache_dir``).
CACHE_SOURCES = ("lowerkit_glow_like.kernels.jit_codes",)
