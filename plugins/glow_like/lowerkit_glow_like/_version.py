"""Versions: the plugin's release and the payload format it reads and writes."""

from __future__ import annotations

__version__ = "0.1.0"

# Bumped whenever the payload layout or an instruction's meaning changes incompatibly.
PAYLOAD_FORMAT = 2  # 2: Winograd convolutions are F(4x4, 3x3) (their scratch grew)
