"""``nn.Module`` and ``nn.Sequential``: containers of parameters and child layers."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..errors import InputError
from ..tracing.parameter import Parameter
from ..tracing.state import current_builder
from ..tracing.traceable import Traceable


class Module(Traceable):
    """Base class of traceable layers and models.

    Assigning a :class:`Parameter` or a ``Module`` to an attribute registers it (in
    assignment order), so parameters get qualified names such as ``layer1.0.conv1.weight``.
    Subclasses call ``super().__init__()`` first and define ``forward``. Calling a module
    is only meaningful while :func:`lowerkit.trace` runs: trace it, then call the result.
    """

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_modules", {})

    def __setattr__(self, name: str, value: Any) -> None:
        registry = self.__dict__.get("_parameters")
        if registry is None:
            if isinstance(value, (Parameter, Module)):
                raise InputError(
                    f"{type(self).__name__}: call super().__init__() before assigning {name!r}"
                )
            object.__setattr__(self, name, value)
            return
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Register ``param`` under ``name`` (``None`` records an absent optional parameter)."""
        if param is None:
            self._parameters.pop(name, None)
            object.__setattr__(self, name, None)
        else:
            setattr(self, name, param)

    def add_module(self, name: str, module: Module) -> None:
        setattr(self, name, module)

    # -- calling ------------------------------------------------------------------------
    def forward(self, *args: Any) -> Any:
        raise InputError(f"{type(self).__name__} defines no forward method")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        builder = current_builder()
        if builder is None:
            raise InputError(
                f"{type(self).__name__} was called outside lowerkit.trace; lowerkit.nn modules "
                "run only as traced graphs: m = lowerkit.trace(model, example_input); y = m(x)"
            )
        with builder.module_scope(self):
            return self.forward(*args, **kwargs)

    def eval(self) -> Module:
        """No-op kept for torch compatibility: lowerkit layers are always in inference mode."""
        return self

    # -- traversal ----------------------------------------------------------------------
    def named_children(self) -> Iterator[tuple[str, Module]]:
        yield from self._modules.items()

    def children(self) -> Iterator[Module]:
        for _, module in self.named_children():
            yield module

    def named_modules(self, prefix: str = "", _memo: set[int] | None = None) -> Iterator[tuple[str, Module]]:
        """This module (under ``prefix``) and every descendant, each once, depth first."""
        memo = set() if _memo is None else _memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, child in self._modules.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name, memo)

    def modules(self) -> Iterator[Module]:
        for _, module in self.named_modules():
            yield module

    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Parameter]]:
        """Qualified names and parameters, each parameter once (first name wins)."""
        seen: set[int] = set()
        modules = self.named_modules(prefix) if recurse else iter([(prefix, self)])
        for path, module in modules:
            for name, param in module._parameters.items():
                if id(param) not in seen:
                    seen.add(id(param))
                    yield (f"{path}.{name}" if path else name), param

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def state_dict(self) -> dict[str, np.ndarray]:
        """Copies of every parameter array under its qualified name."""
        return {name: param.data.copy() for name, param in self.named_parameters()}

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Copy arrays into the parameters; shapes must match, dtypes are cast.

        With ``strict`` (the default) the keys must be exactly this module's parameter names.
        """
        params = dict(self.named_parameters())
        if strict:
            missing = sorted(set(params) - set(state))
            unexpected = sorted(set(state) - set(params))
            if missing or unexpected:
                raise InputError(
                    f"load_state_dict for {type(self).__name__}: missing keys {missing}, "
                    f"unexpected keys {unexpected}"
                )
        staged = {}
        for name, value in state.items():
            if name not in params:
                continue
            array = np.asarray(value)
            expected = params[name].data
            if array.shape != expected.shape:
                raise InputError(
                    f"load_state_dict: parameter {name!r} has shape {list(expected.shape)}, "
                    f"got {list(array.shape)}"
                )
            staged[name] = array.astype(expected.dtype, copy=True)
        for name, array in staged.items():
            params[name].data = array

    # -- printing -----------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not self._modules:
            return head + ")"
        lines = [head]
        for name, child in self._modules.items():
            body = repr(child).replace("\n", "\n  ")
            lines.append(f"  ({name}): {body}")
        return "\n".join(lines) + "\n)"


class Sequential(Module):
    """Runs its children in order; children are named ``0``, ``1``, ..."""

    def __init__(self, *modules: Module) -> None:
        super().__init__()
        for i, module in enumerate(modules):
            if not isinstance(module, Module):
                raise InputError(f"Sequential item {i} must be an nn.Module, got {type(module).__name__}")
            self.add_module(str(i), module)

    def __getitem__(self, index: int) -> Module:
        items = list(self._modules.values())
        try:
            return items[index]
        except IndexError:
            raise IndexError(f"Sequential has {len(items)} modules, no index {index}") from None

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(list(self._modules.values()))

    def forward(self, x: Any) -> Any:
        for module in self._modules.values():
            x = module(x)
        return x
