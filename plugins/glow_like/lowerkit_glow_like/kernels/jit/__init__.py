"""glow_like's own compiled kernels (numba, imported through ``lowerkit.backend.cpu.jit.load``
at bind time, never at plugin import): the fused element-wise chain."""
