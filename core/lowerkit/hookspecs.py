"""The backend contract as pluggy hook specs (stub)."""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("lowerkit")
hookimpl = pluggy.HookimplMarker("lowerkit")
