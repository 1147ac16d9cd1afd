"""Shared setup of the IR tests: the example tables live in ir_examples.py next to this file."""

from __future__ import annotations

import sys
from pathlib import Path

# Keep `import ir_examples` working under any pytest import mode (prepend does this already).
_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
