"""Versions: the plugin's release and the payload format it reads and writes."""

from __future__ import annotations

__version__ = "0.1.0"

# Bumped whenever the payload layout or an instruction's meaning changes incompatibly.
PAYLOAD_FORMAT = 5  # 2: Winograd convolutions are F(4x4, 3x3) (their scratch grew)
# 3: a module with a free batch dim is stored as a module and specialised per batch size
# 4: glow.conv2d may carry a fused residual add (residual=True, a fourth input), which a
#    reader of format 3 would drop without a word
# 5: glow.gated_conv2d may carry one too (residual=True, a fifth input)
