"""How an un-lowered module runs: on the ``reference`` backend, found by entry point.

Temporary minimal version; the backend-contract work replaces the lookup with the registry.
"""

from __future__ import annotations

import numpy as np


def run_module_method(module, method: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    cache = module._runtime_cache
    if cache is None:
        from importlib.metadata import entry_points

        eps = [ep for ep in entry_points(group="lowerkit.backends") if ep.name == "reference"]
        plugin = eps[0].load()
        payload = plugin.lowerkit_preprocess(module=module, compile_spec={})
        handles = plugin.lowerkit_compile(processed=payload, compile_spec={})
        cache = module._runtime_cache = (plugin, handles)
    plugin, handles = cache
    return list(plugin.lowerkit_execute(handle=handles[method], inputs=inputs))
