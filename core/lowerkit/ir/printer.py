"""The text form of graphs and modules (the inverse of :mod:`lowerkit.ir.parser`).

A graph prints as one ``method`` block in let-binding form::

    method forward(%x: f32[1, 3, 8, 8]) -> f32[1, 10] {
      %w: f32[16, 3, 3, 3] = param(name="conv.weight")  #1 @conv at "net.py":12
      %y: f32[1, 16, 8, 8] = conv2d(%x, %w, stride=[1, 1], ...)  #2 @conv at "net.py":12
      return %y
    }

Every literal prints so that it parses back exactly: floats as ``repr`` of the Python float
(float32 and float16 values convert to Python floats exactly), tensors element by element
with NaN payloads spelled out, strings quoted with escapes. See ``docs/ir.md`` for the grammar.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .graph import Graph
from .node import AttrValue, Node, SourceLocation
from .types import TensorType, dtype_name

if TYPE_CHECKING:  # pragma: no cover
    from .module import Module

__all__ = ["format_graph", "format_module", "format_attr", "format_tensor", "format_metadata"]

# Tensors with more elements than this are elided by format_module (not by format_graph).
ELIDE_ABOVE = 16

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# A scope prints bare when it is made of these characters (``layer1.0.conv1``), else quoted.
BARE_SCOPE = re.compile(r"[A-Za-z0-9_.]+\Z")


def quote(text: str) -> str:
    """``text`` as a double-quoted string literal with backslash escapes."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif code < 0x20 or code == 0x7F or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def format_name(name: str) -> str:
    """A value name after ``%``: bare if it is an identifier, quoted otherwise."""
    return "%" + (name if IDENT.match(name) else quote(name))


def format_ident(name: str) -> str:
    """A method name: bare if it is an identifier, quoted otherwise."""
    return name if IDENT.match(name) else quote(name)


def format_float(value: float) -> str:
    """A float that parses back to the same value (``repr``: ``1.0``, ``1e-05``, ``inf``, ``nan``)."""
    return repr(float(value))


def _float_elements(flat: np.ndarray) -> list[str]:
    texts = [repr(v) for v in flat.tolist()]
    nan_at = np.flatnonzero(np.isnan(flat))
    if nan_at.size:
        # NaNs keep sign and payload: "nan"/"-nan" for the canonical quiet NaN, else the bits.
        uint = np.dtype(f"u{flat.dtype.itemsize}")
        bits = flat.view(uint)
        canonical = int(np.array(np.nan, dtype=flat.dtype).view(uint))
        sign = 1 << (8 * flat.dtype.itemsize - 1)
        width = 2 * flat.dtype.itemsize
        for i in nan_at.tolist():
            b = int(bits[i])
            if b == canonical:
                texts[i] = "nan"
            elif b == canonical | sign:
                texts[i] = "-nan"
            else:
                texts[i] = f"nan:0x{b:0{width}x}"
    return texts


def _nest(texts: list[str], shape: tuple[int, ...]) -> str:
    if not shape:
        return texts[0]
    if len(shape) == 1:
        return "[" + ", ".join(texts) + "]"
    step = len(texts) // shape[0] if shape[0] else 0
    parts = [_nest(texts[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]
    return "[" + ", ".join(parts) + "]"


def format_tensor(array: np.ndarray, *, elide: bool = False) -> str:
    """``tensor<f32[2, 2]>[[1.0, 2.0], [3.0, 4.0]]``; with ``elide`` large ones print ``[...]``."""
    array = np.asarray(array)
    try:
        ttype = TensorType(dtype_name(array.dtype), array.shape)
    except ValueError:  # the verifier rejects these; still print something readable
        return f"tensor<unsupported {array.dtype}{list(array.shape)}>[...]"
    head = f"tensor<{ttype}>"
    if elide and array.size > ELIDE_ABOVE:
        return head + "[...]"
    flat = np.ascontiguousarray(array).reshape(-1)
    if array.dtype.kind == "f":
        texts = _float_elements(flat)
    elif array.dtype.kind == "b":
        texts = ["true" if v else "false" for v in flat.tolist()]
    else:
        texts = [str(v) for v in flat.tolist()]
    return head + _nest(texts, tuple(array.shape))


def format_attr(value: AttrValue | None, *, elide_tensors: bool = False) -> str:
    """One attribute value in the text form."""
    if value is None:
        return "none"
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return format_float(float(value))
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, np.ndarray):
        return format_tensor(value, elide=elide_tensors)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(format_attr(v) for v in value) + "]"
    raise TypeError(f"cannot print attribute value {value!r} of type {type(value).__name__}")


def format_source(source: SourceLocation) -> str:
    return f"{quote(source.file)}:{source.line}"


def format_metadata(node: Node) -> str:
    """The metadata suffix: ``#<handle> @<scope> at "<file>":<line>``, each part optional."""
    parts = []
    if node.debug_handle != -1:
        parts.append(f"#{node.debug_handle}")
    if node.scope:
        scope = node.scope if BARE_SCOPE.match(node.scope) else quote(node.scope)
        parts.append(f"@{scope}")
    if node.source is not None:
        parts.append(f"at {format_source(node.source)}")
    return " ".join(parts)


def _ordered_attrs(node: Node) -> list[str]:
    from ..opset import has_schema, get_schema

    keys = list(node.attrs)
    if not has_schema(node.op):
        return keys
    order = [a.name for a in get_schema(node.op).attrs]
    known = [k for k in order if k in node.attrs]
    return known + [k for k in keys if k not in order]


def format_node(node: Node, *, elide_tensors: bool = False) -> str:
    """One node as a line (without indentation)."""
    args = [format_name(v.name) for v in node.inputs]
    args += [
        f"{key}={format_attr(node.attrs[key], elide_tensors=elide_tensors)}"
        for key in _ordered_attrs(node)
    ]
    text = f"{node.op}({', '.join(args)})"
    if node.outputs:
        lhs = ", ".join(f"{format_name(v.name)}: {v.type}" for v in node.outputs)
        text = f"{lhs} = {text}"
    meta = format_metadata(node)
    return f"{text}  {meta}" if meta else text


def format_result_types(types: Sequence[TensorType], returns_tuple: bool) -> str:
    if returns_tuple or len(types) != 1:
        return "(" + ", ".join(str(t) for t in types) + ")"
    return str(types[0])


def format_graph(
    graph: Graph,
    name: str = "forward",
    *,
    elide_tensors: bool = False,
    returns_tuple: bool | None = None,
) -> str:
    """The text form of ``graph`` as method ``name``.

    ``returns_tuple`` (default: whether the graph has other than one output) prints the
    result type as ``(t1, ...)``. With ``elide_tensors`` tensors of more than 16 elements
    print as ``tensor<f32[..]>[...]``, which does not parse back.
    """
    if returns_tuple is None:
        returns_tuple = len(graph.outputs) != 1
    params = ", ".join(f"{format_name(v.name)}: {v.type}" for v in graph.inputs)
    result = format_result_types([v.type for v in graph.outputs], returns_tuple)
    lines = [f"method {format_ident(name)}({params}) -> {result} {{"]
    lines += ["  " + format_node(n, elide_tensors=elide_tensors) for n in graph.nodes]
    outs = ", ".join(format_name(v.name) for v in graph.outputs)
    lines.append(f"  return {outs}" if outs else "  return")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _submodule_kind(sub: object) -> str:
    from .module import Module

    if isinstance(sub, Module):
        return f"module {format_ident(sub.name)}"
    backend = getattr(sub, "backend", None)
    if isinstance(backend, (list, tuple)):
        backend = ",".join(str(b) for b in backend)
    return f"lowered {backend}" if backend else f"lowered {type(sub).__name__}"


def format_module(module: Module) -> str:
    """A module: its name, parameter names and types, submodules, then every method.

    Tensors of more than 16 elements in constants are elided; use :func:`format_graph` on
    ``lowerkit.graph_of(module, name)`` for text that parses back.
    """
    from .module import GraphMethod

    lines = [f"module {format_ident(module.name)} {{"]
    for key, array in module.parameters.items():
        try:
            shown = str(TensorType.of(array))
        except ValueError:
            shown = f"<unsupported {array.dtype}>{list(array.shape)}"
        lines.append(f"  parameter {quote(key)}: {shown}")
    for key, sub in module.submodules.items():
        lines.append(f"  submodule {quote(key)}: {_submodule_kind(sub)}")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    for name, method in module.methods.items():
        text += "\n"
        if isinstance(method, GraphMethod):
            text += format_graph(
                method.graph, name, elide_tensors=True, returns_tuple=method.returns_tuple
            )
        else:
            sig = method.signature
            params = ", ".join(f"{format_name(n)}: {t}" for n, t in sig.inputs)
            result = format_result_types(sig.outputs, sig.returns_tuple)
            kind = type(method).__name__
            text += f"method {format_ident(name)}({params}) -> {result} = lowered {kind}\n"
    return text
