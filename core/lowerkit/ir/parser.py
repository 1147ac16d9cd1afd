"""Parse the text form printed by :mod:`lowerkit.ir.printer` back into a :class:`Graph`.

A hand-written recursive-descent parser over the source text. Attribute values are read by
the kind the op's schema declares (``stride=[1, 1]`` is ``ints``, ``min=0`` of ``clip`` is a
float). Every error is a :class:`~lowerkit.errors.ParseError` naming line, column, what was
expected and what was found. The grammar is in ``docs/ir.md``.
"""

from __future__ import annotations

import json
import re

import numpy as np

from ..errors import ParseError
from .graph import Graph
from .node import AttrValue, Node, SourceLocation, Value
from .types import DTYPES, TensorType

__all__ = ["parse_graph"]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SCOPE = re.compile(r"[A-Za-z0-9_.]+")
_INT = re.compile(r"[-+]?[0-9]+")
_FLOAT = re.compile(
    r"[-+]?(?:nan:0x[0-9a-fA-F]+|nan|inf|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)"
)
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_MAX_TENSOR_RANK = 32  # tensor literals nest one bracket per dim; bounds the recursion
_TOKEN_END = re.compile(r"[^\s,()\[\]{}<>=:]*")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.depth = 0  # inside (...) or [...] newlines are plain whitespace

    # -- positions and errors -----------------------------------------------------------
    def location(self, pos: int | None = None) -> tuple[int, int]:
        pos = self.pos if pos is None else pos
        line = self.text.count("\n", 0, pos) + 1
        column = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        return line, column

    def error(self, expected: str, pos: int | None = None, found: str | None = None) -> ParseError:
        pos = self.pos if pos is None else pos
        line, column = self.location(pos)
        if found is None:
            if pos >= len(self.text):
                found = "end of input"
            elif self.text[pos] == "\n":
                found = "end of line"
            else:
                match = _TOKEN_END.match(self.text, pos)
                token = match.group(0) if match and match.group(0) else self.text[pos]
                found = repr(token[:30])
        return ParseError(f"line {line}, column {column}: expected {expected}, got {found}")

    # -- scanning ------------------------------------------------------------------------
    def ws(self, newlines: bool = False) -> None:
        """Skip blanks and ``//`` comments; newlines too inside brackets or when asked."""
        text = self.text
        while self.pos < len(text):
            ch = text[self.pos]
            if ch in " \t\r" or (ch == "\n" and (newlines or self.depth > 0)):
                self.pos += 1
            elif text.startswith("//", self.pos):
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
            else:
                break

    def peek(self, literal: str) -> bool:
        self.ws()
        return self.text.startswith(literal, self.pos)

    def accept(self, literal: str) -> bool:
        if self.peek(literal):
            self.pos += len(literal)
            return True
        return False

    def expect(self, literal: str, what: str | None = None) -> None:
        if not self.accept(literal):
            raise self.error(what or repr(literal))

    def match(self, pattern: re.Pattern[str]) -> str | None:
        self.ws()
        m = pattern.match(self.text, self.pos)
        if m is None:
            return None
        self.pos = m.end()
        return m.group(0)

    def keyword(self, word: str) -> bool:
        """Accept ``word`` only as a whole identifier."""
        self.ws()
        m = _IDENT.match(self.text, self.pos)
        if m is not None and m.group(0) == word:
            self.pos = m.end()
            return True
        return False

    def end_of_line(self) -> None:
        self.ws()
        if self.pos < len(self.text) and self.text[self.pos] != "\n":
            raise self.error("end of line")
        self.ws(newlines=True)

    # -- tokens ----------------------------------------------------------------------------
    def string(self) -> str:
        start = self.pos
        token = self.match(_STRING)
        if token is None:
            raise self.error("a double-quoted string")
        try:
            return json.loads(token)
        except json.JSONDecodeError:
            raise self.error("a string with valid escapes", start) from None

    def ident(self, what: str = "an identifier") -> str:
        if self.peek('"'):
            return self.string()
        token = self.match(_IDENT)
        if token is None:
            raise self.error(what)
        return token

    def integer(self, what: str = "an integer") -> int:
        start = self.pos
        token = self.match(_INT)
        if token is None:
            raise self.error(what)
        if len(token.lstrip("+-")) > 40:  # also keeps int() clear of its digit limit
            raise self.error(f"{what} of at most 40 digits", start, repr(token[:20] + "..."))
        return int(token)

    def value_name(self) -> str:
        if not self.accept("%"):
            raise self.error("a value name like %x")
        if self.text.startswith('"', self.pos):
            return self.string()
        m = _IDENT.match(self.text, self.pos)
        if m is None:
            raise self.error("a value name after '%'")
        self.pos = m.end()
        return m.group(0)

    def tensor_type(self) -> TensorType:
        self.ws()
        start = self.pos
        dtype = self.match(_IDENT)
        if dtype is None or dtype not in DTYPES:
            self.pos = start
            raise self.error(f"a dtype ({', '.join(DTYPES)})")
        self.expect("[", "'[' starting a shape")
        self.depth += 1
        dims: list[int | str] = []
        if not self.accept("]"):
            while True:
                self.ws()
                at = self.pos
                symbol = self.match(_IDENT)
                if symbol is not None:  # a symbolic dim such as N
                    dims.append(symbol)
                else:
                    dim = self.integer("a dimension or a symbolic dim name")
                    if dim < 0:
                        raise self.error("a non-negative dimension", at, str(dim))
                    dims.append(dim)
                if self.accept("]"):
                    break
                self.expect(",", "',' or ']' in a shape")
        self.depth -= 1
        return TensorType(dtype, tuple(dims))

    # -- literals ---------------------------------------------------------------------------
    def float_literal(self) -> float:
        token = self.match(_FLOAT)
        if token is None:
            raise self.error("a float")
        if "nan:" in token:  # a NaN payload only means something in tensors
            return float("nan")
        return float(token)

    def bool_literal(self) -> bool:
        if self.keyword("true"):
            return True
        if self.keyword("false"):
            return False
        raise self.error("true or false")

    def attr_value(self, kind: str, op: str, name: str) -> AttrValue | None:
        if self.keyword("none"):
            return None
        if kind == "int":
            return self.integer(f"an int for attribute {name!r} of {op}")
        if kind == "float":
            return self.float_literal()
        if kind == "bool":
            return self.bool_literal()
        if kind == "str":
            return self.string()
        if kind in ("ints", "floats"):
            items: list[AttrValue] = []
            self.expect("[", f"'[' starting a list for attribute {name!r} of {op} ({kind})")
            self.depth += 1
            if not self.accept("]"):
                while True:
                    if kind == "ints":
                        items.append(self.integer(f"an int in attribute {name!r} of {op}"))
                    else:
                        items.append(self.float_literal())
                    if self.accept("]"):
                        break
                    self.expect(",", "',' or ']'")
            self.depth -= 1
            return tuple(items)  # type: ignore[return-value]
        if kind == "tensor":
            return self.tensor()
        raise self.error(f"an attribute of a known kind (schema says {kind!r})")

    def tensor(self) -> np.ndarray:
        if not self.keyword("tensor"):
            raise self.error("a tensor literal like tensor<f32[2]>[1.0, 2.0]")
        self.expect("<", "'<' after 'tensor'")
        at = self.pos
        ttype = self.tensor_type()
        if ttype.rank > _MAX_TENSOR_RANK:
            raise self.error(f"a tensor of rank at most {_MAX_TENSOR_RANK}", at, f"rank {ttype.rank}")
        free = [d for d in ttype.shape if not isinstance(d, int)]
        if free:
            raise self.error("a tensor literal of static shape", at, f"free dimension {free[0]!r}")
        self.expect(">", "'>' closing the tensor type")
        self.ws()
        if self.text.startswith("[...]", self.pos):
            raise self.error("tensor elements (this tensor was elided when printed)")
        dtype = ttype.numpy_dtype
        kind = dtype.kind
        items: list[object] = []
        nan_bits: dict[int, int] = {}

        def element() -> None:
            at = self.pos
            if kind == "f":
                self.ws()
                at = self.pos
                token = self.match(_FLOAT)
                if token is None:
                    raise self.error(f"a {ttype.dtype} element")
                if "nan:" in token:
                    bits = int(token.split(":", 1)[1], 16)
                    if bits >> (8 * dtype.itemsize) or token.startswith("-"):
                        raise self.error(f"NaN bits that fit {ttype.dtype}", at, repr(token))
                    nan_bits[len(items)] = bits
                    items.append(float("nan"))
                else:
                    items.append(float(token))
            elif kind == "b":
                items.append(self.bool_literal())
            else:
                self.ws()
                at = self.pos
                number = self.integer(f"a {ttype.dtype} element")
                info = np.iinfo(dtype)
                if not info.min <= number <= info.max:
                    raise self.error(f"a {ttype.dtype} element in range", at, str(number))
                items.append(number)

        def nested(shape: tuple[int, ...]) -> None:
            if not shape:
                element()
                return
            self.expect("[", f"'[' starting a row of {shape[0]}")
            self.depth += 1
            for i in range(shape[0]):
                if i:
                    self.expect(",", f"',' (row holds {shape[0]} entries)")
                nested(shape[1:])
            self.expect("]", f"']' after {shape[0]} entries")
            self.depth -= 1

        start = self.pos
        nested(ttype.shape)
        with np.errstate(over="ignore", invalid="ignore"):
            array = np.array(items, dtype=dtype).reshape(ttype.shape)
        if kind == "f":
            wide = np.array(items, dtype=np.float64)
            if np.any(np.isinf(array.reshape(-1)) & np.isfinite(wide)):
                raise self.error(f"{ttype.dtype} elements in range", start, "an overflowing value")
            if nan_bits:
                flat = array.reshape(-1).view(np.dtype(f"u{dtype.itemsize}"))
                for i, bits in nan_bits.items():
                    flat[i] = bits
        return array

    # -- graph ---------------------------------------------------------------------------------
    def metadata(self) -> tuple[int, str, SourceLocation | None]:
        handle, scope, source = -1, "", None
        if self.accept("#"):
            handle = self.integer("a debug handle after '#'")
        if self.accept("@"):
            if self.peek('"'):
                scope = self.string()
            else:
                token = self.match(_SCOPE)
                if token is None:
                    raise self.error("a scope after '@'")
                scope = token
        if self.keyword("at"):
            file = self.string()
            self.expect(":", "':' between source file and line")
            source = SourceLocation(file, self.integer("a source line number"))
        return handle, scope, source

    def node(self, graph: Graph, env: dict[str, Value], lines: dict[str, int]) -> None:
        from ..opset import get_schema, has_schema

        outputs: list[Value] = []
        if self.peek("%"):
            while True:
                at = self.pos
                name = self.value_name()
                if name in env:
                    raise self.error(
                        f"a fresh name (%{name} is already bound on line {lines[name]})",
                        at, f"%{name}",
                    )
                self.expect(":", f"':' and the type of %{name}")
                value = Value(name, self.tensor_type())
                outputs.append(value)
                env[name] = value
                lines[name] = self.location(at)[0]
                if self.accept("="):
                    break
                self.expect(",", "',' or '=' after a bound value")
        self.ws()
        at = self.pos
        op = self.ident("an op name")
        if not has_schema(op):
            raise self.error("a registered op", at, f"unknown op {op!r}")
        schema = get_schema(op)
        self.expect("(", f"'(' after {op}")
        self.depth += 1
        inputs: list[Value] = []
        attrs: dict[str, AttrValue] = {}
        if not self.accept(")"):
            while True:
                self.ws()
                at = self.pos
                if self.peek("%"):
                    if attrs:
                        raise self.error("an attribute (inputs come before attributes)")
                    name = self.value_name()
                    if name not in env:
                        raise self.error("a value defined above", at, f"undefined value %{name}")
                    inputs.append(env[name])
                else:
                    key = self.ident("an input value or an attribute name")
                    try:
                        spec = schema.attr(key)
                    except KeyError:
                        known = ", ".join(a.name for a in schema.attrs) or "none"
                        raise self.error(
                            f"an attribute of {op} ({known})", at, repr(key)
                        ) from None
                    if key in attrs:
                        raise self.error(f"each attribute once", at, f"{key!r} again")
                    self.expect("=", f"'=' after attribute {key!r}")
                    attrs[key] = self.attr_value(spec.kind, op, key)  # type: ignore[assignment]
                if self.accept(")"):
                    break
                self.expect(",", "',' or ')'")
        self.depth -= 1
        handle, scope, source = self.metadata()
        graph.nodes.append(Node(op, inputs, outputs, attrs, handle, scope, source))

    def graph(self) -> tuple[str, Graph, bool]:
        graph = Graph()
        env: dict[str, Value] = {}
        lines: dict[str, int] = {}
        self.ws(newlines=True)
        if not self.keyword("method"):
            raise self.error("'method'")
        name = self.ident("a method name")
        self.expect("(", "'(' starting the method's inputs")
        self.depth += 1
        if not self.accept(")"):
            while True:
                at = self.pos
                vname = self.value_name()
                if vname in env:
                    raise self.error("distinct input names", at, f"%{vname} again")
                self.expect(":", f"':' and the type of %{vname}")
                value = Value(vname, self.tensor_type())
                graph.inputs.append(value)
                env[vname] = value
                lines[vname] = self.location(at)[0]
                if self.accept(")"):
                    break
                self.expect(",", "',' or ')'")
        self.depth -= 1
        self.expect("->", "'->' and the result type")
        returns_tuple = False
        result_types: list[TensorType] = []
        if self.accept("("):
            returns_tuple = True
            self.depth += 1
            if not self.accept(")"):
                while True:
                    result_types.append(self.tensor_type())
                    if self.accept(")"):
                        break
                    self.expect(",", "',' or ')'")
            self.depth -= 1
        else:
            result_types.append(self.tensor_type())
        self.expect("{", "'{' opening the method body")
        self.end_of_line()
        while True:
            self.ws(newlines=True)
            if self.keyword("return"):
                break
            if self.pos >= len(self.text) or self.peek("}"):
                raise self.error("a node or 'return'")
            self.node(graph, env, lines)
            self.end_of_line()
        ret_at = self.pos
        self.ws()
        if self.pos < len(self.text) and self.text[self.pos] not in "\n}":
            while True:
                at = self.pos
                vname = self.value_name()
                if vname not in env:
                    raise self.error("a value defined above", at, f"undefined value %{vname}")
                graph.outputs.append(env[vname])
                if not self.accept(","):
                    break
        types = [v.type for v in graph.outputs]
        if types != result_types:
            shown = ", ".join(str(t) for t in types) or "nothing"
            wanted = ", ".join(str(t) for t in result_types) or "nothing"
            raise self.error(f"returned values of types ({wanted}) as declared", ret_at, shown)
        self.end_of_line()
        self.expect("}", "'}' closing the method")
        self.ws(newlines=True)
        if self.pos < len(self.text):
            raise self.error("end of input after the method")
        for vname in env:
            graph.namespace.reserve(vname)
        return name, graph, returns_tuple or len(graph.outputs) != 1


def parse_graph(text: str) -> tuple[str, Graph, bool]:
    """Parse one ``method`` block; returns ``(method name, graph, returns_tuple)``.

    Value names are kept (and reserved in the graph's namespace). Raises
    :class:`~lowerkit.errors.ParseError` with line and column on malformed text, unknown
    ops, unknown attributes and undefined or rebound values.
    """
    if not isinstance(text, str):
        raise ParseError(f"expected the text of a graph (str), got {type(text).__name__}")
    return _Parser(text).graph()
