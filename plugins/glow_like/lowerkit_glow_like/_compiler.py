"""Preprocess: module -> optimized graph -> program with a memory plan, per method."""

from __future__ import annotations

from lowerkit.ir import Graph, GraphMethod, Module

from ._graph import working_graph
from ._options import Options, parse_options
from .lir import Program, build_program, plan_memory
from .passes import optimize
from .passes.means import fuse_plane_means
from .passes.residual import fuse_residual_adds


def optimized_graph(module: Module, method: str, opt_level: int) -> tuple[Graph, list[str]]:
    """The method's graph after the passes of ``opt_level``, and the passes that fired."""
    graph = working_graph(module, method)
    fired = optimize(graph, opt_level)
    return graph, fired


def compile_method(module: Module, method: str, options: Options) -> Program:
    """Everything decidable ahead of time for one method: passes, program, memory plan."""
    graph, fired = optimized_graph(module, method, options.opt_level)
    if options.precision == "int8":
        from .quant.rewrite import quantize_graph
        from .quant.profile import load_profile

        profile = load_profile(options.profile)
        profile.check_matches(graph, method)
        quantize_graph(graph, profile)
        fired.append("quantize_graph")
    elif options.opt_level >= 2:
        fired += [name for name, fuse in (("fuse_residual_adds", fuse_residual_adds),
                                          ("fuse_plane_means", fuse_plane_means)) if fuse(graph)]
    program = build_program(graph, method, options.stored())
    program.passes = fired
    plan_memory(program)
    return program


def compile_module(module: Module, compile_spec: dict) -> list[Program]:
    """One program per graph method of ``module`` (options from ``compile_spec``)."""
    compile_spec = compile_spec or {}
    programs = []
    for name, method in module.methods.items():
        if isinstance(method, GraphMethod):
            programs.append(compile_method(module, name, parse_options(name, compile_spec.get(name))))
    return programs
