"""Test backends that support a subset of ops, registered in-process for one test."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from lowerkit.backend import unregister_backend
from lowerkit.errors import NodeExecutionError
from lowerkit.backend.hookspecs import Unsupported, hookimpl
from lowerkit.ir.interpreter import Interpreter

KERNELS = pytest.importorskip("lowerkit_reference").KERNELS


class SubsetBackend:
    """Runs the ops it claims with the reference kernels; can be told to fail on one op."""

    def __init__(self, name: str, ops: set[str], fail_on: str | None = None) -> None:
        self.name, self.ops, self.fail_on = name, ops, fail_on
        self.available = True

    @hookimpl
    def lowerkit_is_supported(self, node):
        if node.op in self.ops:
            return True
        return Unsupported(f"{self.name} has no {node.op} kernel")

    @hookimpl
    def lowerkit_is_available(self):
        return self.available

    @hookimpl
    def lowerkit_preprocess(self, module, compile_spec):
        return lk.dumps(module)

    @hookimpl
    def lowerkit_compile(self, processed, compile_spec):
        module = lk.loads(processed)
        return {name: (module, name) for name in module.methods}

    @hookimpl
    def lowerkit_execute(self, handle, inputs):
        module, method = handle
        fail_on = self.fail_on

        class Failing(Interpreter):
            def call_kernel(self, node, args):
                if node.op == fail_on:
                    raise NodeExecutionError(node.debug_handle, f"{node.op} kernel crashed")
                return super().call_kernel(node, args)

        return Failing(module, KERNELS).run(method, [np.asarray(i) for i in inputs])


@pytest.fixture
def subset_backends():
    """``make(name, ops, fail_on=None)`` registers a SubsetBackend for this test."""
    names = []

    def make(name, ops, fail_on=None):
        backend = SubsetBackend(name, set(ops), fail_on)
        lk.register_backend(backend, name, distribution=f"lowerkit-{name}", version="0.0.1", replace=True)
        names.append(name)
        return backend

    yield make
    for name in names:
        unregister_backend(name)
