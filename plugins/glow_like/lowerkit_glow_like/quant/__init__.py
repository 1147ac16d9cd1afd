"""Profile-guided int8 quantization: calibrate, then compile with ``precision: "int8"``."""

from __future__ import annotations

from .calibrate import calibrate
from .profile import Profile

__all__ = ["Profile", "calibrate"]
