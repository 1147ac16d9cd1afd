"""lowerkit.backend.cpu sits beside the core, not in it: backends import it, the core does not,
and it imports nothing of lowerkit but errors and the IR."""

from __future__ import annotations

import ast
from pathlib import Path

import lowerkit

CORE = Path(lowerkit.__file__).parent
CPU = CORE / "backend" / "cpu"
ALLOWED_IN_CPU = ("lowerkit.errors", "lowerkit.ir", "lowerkit.backend.cpu")
STDLIB_AND_NUMPY = {"__future__", "collections", "concurrent", "contextlib", "ctypes", "dataclasses", "fractions", "functools", "glob",
                    "hashlib", "importlib", "math", "numpy", "os", "platform", "sys", "threading", "time", "types",
                    "typing", "weakref"}
# The compiled kernels import numba at their top; only lowerkit.backend.cpu.jit.load imports them.
JIT = CPU / "jit"
JIT_PLAIN = ("__init__.py", "activation.py", "select.py")


def _imports(path: Path) -> list[tuple[str, int]]:
    """Absolute module names ``path`` imports (relative imports resolved), with line numbers."""
    package = ".".join(path.relative_to(CORE.parent).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            found.append((name, node.lineno))
    return found


def test_no_other_core_module_imports_the_cpu_support():
    offenders = [
        f"{path.relative_to(CORE.parent)}:{line} imports {name}"
        for path in CORE.rglob("*.py")
        if CPU not in path.parents
        for name, line in _imports(path)
        if name == "lowerkit.backend.cpu" or name.startswith("lowerkit.backend.cpu.")
    ]
    assert not offenders, offenders


def test_the_cpu_support_imports_only_errors_ir_numpy_and_threadpoolctl_lazily():
    offenders = []
    for path in CPU.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        top_level = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            names = [name for name, line in _imports(path) if line == node.lineno]
            for name in names:
                root = name.split(".")[0]
                if name.startswith("lowerkit"):
                    ok = any(name == a or name.startswith(a + ".") for a in ALLOWED_IN_CPU)
                elif root == "threadpoolctl":
                    ok = id(node) not in top_level  # only inside functions: loaded on first use
                elif root in ("numba", "llvmlite"):
                    ok = (path.parent == JIT and path.name not in JIT_PLAIN) or id(node) not in top_level
                else:
                    ok = root in STDLIB_AND_NUMPY
                if not ok:
                    offenders.append(f"{path.name}:{node.lineno} imports {name}")
    assert not offenders, offenders
