"""lowerkit's graph IR: typed SSA values, nodes, graphs and modules."""

from __future__ import annotations

from .graph import Graph
from .module import GraphMethod, Method, Module, Signature, check_inputs, format_outputs, graph_of
from .names import Namespace
from .node import AttrValue, Node, SourceLocation, Value
from .types import DTYPES, TensorType, dtype_name
from .equality import graph_diff, graphs_equal
from .parser import parse_graph
from .printer import format_graph, format_module
from .verify import verify_graph, verify_module

__all__ = [
    "DTYPES", "AttrValue", "Graph", "GraphMethod", "Method", "Module", "Namespace", "Node",
    "Signature", "SourceLocation", "TensorType", "Value", "check_inputs", "dtype_name",
    "format_outputs", "graph_of",
    "format_graph", "format_module", "graph_diff", "graphs_equal", "parse_graph",
    "verify_graph", "verify_module",
]
