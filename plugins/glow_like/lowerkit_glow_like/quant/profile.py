"""Calibration profiles: per-value ranges of one method's optimized fp32 graph, as JSON.

Values are named as in the graph glow_like optimizes at ``opt_level`` 2 (fusion keeps the
final value's name), and a fingerprint of that graph guards against using a profile with
another model.
"""

from __future__ import annotations

import hashlib
import json
import os

from lowerkit.errors import FormatError, InputError
from lowerkit.ir import Graph

FORMAT = "lowerkit-glow-like-profile"
VERSION = 1


def graph_fingerprint(graph: Graph) -> str:
    """A digest of the graph's structure: ops, value names and types, in order."""
    h = hashlib.sha256()
    for v in graph.inputs:
        h.update(f"in {v.name} {v.type}\n".encode())
    for node in graph.nodes:
        ins = " ".join(v.name for v in node.inputs)
        outs = " ".join(f"{v.name}:{v.type}" for v in node.outputs)
        h.update(f"{node.op} {ins} -> {outs}\n".encode())
    return h.hexdigest()[:32]


class Profile(dict):
    """Observed ``[min, max]`` of every value of one method, over ``batches`` calibration runs.

    A plain JSON-shaped dict underneath (``format``, ``version``, ``method``, ``fingerprint``,
    ``batches``, ``ranges``), so it can sit in a ``compile_spec`` that lowerkit saves.
    """

    def __init__(self, method: str, fingerprint: str, ranges: dict | None = None, batches: int = 0) -> None:
        super().__init__(
            format=FORMAT, version=VERSION, method=method, fingerprint=fingerprint, batches=int(batches),
            ranges={str(k): [float(v[0]), float(v[1])] for k, v in (ranges or {}).items()},
        )

    @property
    def method(self) -> str:
        return self["method"]

    @property
    def fingerprint(self) -> str:
        return self["fingerprint"]

    @property
    def batches(self) -> int:
        return self["batches"]

    @property
    def ranges(self) -> dict[str, list[float]]:
        return self["ranges"]

    def observe(self, name: str, lo: float, hi: float) -> None:
        old = self["ranges"].get(name)
        self["ranges"][name] = [lo, hi] if old is None else [min(old[0], lo), max(old[1], hi)]

    def count_batch(self) -> None:
        self["batches"] += 1

    def range_of(self, name: str) -> tuple[float, float]:
        try:
            lo, hi = self["ranges"][name]
            return float(lo), float(hi)
        except KeyError:
            raise InputError(
                f"glow_like profile for method {self.method!r} has no range for value %{name}; "
                "calibrate again with this module"
            ) from None

    def check_matches(self, graph: Graph, method: str) -> None:
        """Raise ``InputError`` unless this profile was recorded on this method's graph."""
        if method != self.method:
            raise InputError(f"glow_like profile was recorded for method {self.method!r}, not {method!r}")
        found = graph_fingerprint(graph)
        if found != self.fingerprint:
            raise InputError(
                f"glow_like profile (graph fingerprint {self.fingerprint}) was recorded on another "
                f"model than method {method!r} (fingerprint {found}); calibrate again"
            )

    def to_json(self) -> str:
        return json.dumps(dict(self), indent=1, sort_keys=True)

    def save(self, path: str | os.PathLike) -> None:
        """Write the profile as JSON (atomically: a temporary file then a rename)."""
        tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(self.to_json())
        os.replace(tmp, path)

    @classmethod
    def from_dict(cls, data: object, where: str = "profile") -> Profile:
        """Validate a JSON-shaped dict (e.g. from a saved compile_spec) into a Profile."""
        try:
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                found = data.get("format") if isinstance(data, dict) else type(data).__name__
                raise FormatError(f"{where} is not a glow_like profile (format {found!r})")
            if data.get("version") != VERSION:
                raise FormatError(f"{where} has profile version {data.get('version')!r}, this plugin reads {VERSION}")
            ranges = {str(k): (float(v[0]), float(v[1])) for k, v in data["ranges"].items()}
            return cls(str(data["method"]), str(data["fingerprint"]), ranges, int(data.get("batches", 0)))
        except FormatError:
            raise
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as err:
            raise FormatError(f"{where} is not a valid glow_like profile: {err}") from None

    @classmethod
    def from_json(cls, text: str, where: str = "profile") -> Profile:
        try:
            data = json.loads(text)
        except ValueError as err:
            raise FormatError(f"{where} is not JSON: {err}") from None
        return cls.from_dict(data, where)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Profile:
        """Read a profile written by :meth:`save`."""
        with open(path, encoding="utf-8") as f:
            return cls.from_json(f.read(), where=f"profile file {os.fspath(path)!r}")


def load_profile(profile: Profile | dict | str | os.PathLike) -> Profile:
    """A Profile given as itself, as its dict form, or as the path it was saved to."""
    if isinstance(profile, Profile):
        return profile
    if isinstance(profile, dict):
        return Profile.from_dict(profile)
    if isinstance(profile, (str, os.PathLike)):
        return Profile.load(profile)
    raise InputError(f"glow_like 'profile' must be a Profile, its dict form or a path, got {type(profile).__name__}")
