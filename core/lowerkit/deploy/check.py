"""Pre-flight: can a file's regions run on a target, and if not, would a fallback cover them?"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import InputError
from .needs import Need, needs_of, read_needs
from .target import Target, TargetBackend, load_target, local_target, parse_target

__all__ = ["CheckReport", "RegionCheck", "check"]

FALLBACKS = (None, "reference")


@dataclass(frozen=True, slots=True)
class RegionCheck:
    """One region on the target: ``ok``, else ``problem`` and whether a fallback covers it."""

    need: Need
    ok: bool
    status: str  # "ok", "missing", "broken", "unavailable", "incompatible payload"
    detail: str = ""
    fallback: str = ""  # "reference (kept original)" when a fallback would run it, else ""
    fallback_note: str = ""  # why not, when it would not

    @property
    def covered(self) -> bool:
        """Runs on the target: by its backend, or by the fallback."""
        return self.ok or bool(self.fallback)


@dataclass(frozen=True, slots=True)
class CheckReport:
    """The pre-flight of one file against one target."""

    file: str
    target: str
    fallback: str | None
    regions: list[RegionCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every region runs: on its backend, or (when a fallback was asked) on the fallback."""
        if self.fallback is None:
            return all(r.ok for r in self.regions)
        return all(r.covered for r in self.regions)

    def __bool__(self) -> bool:
        return self.ok

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "target": self.target,
            "fallback": self.fallback,
            "ok": self.ok,
            "regions": [
                {**asdict(r.need), "ok": r.ok, "status": r.status, "detail": r.detail,
                 "fallback": r.fallback, "fallback_note": r.fallback_note}
                for r in self.regions
            ],
        }

    def __str__(self) -> str:
        rows = [("REGION", "BACKEND", "MADE WITH", "PAYLOAD", "STATUS", "FALLBACK")]
        for r in self.regions:
            n = r.need
            made = " ".join(p for p in (n.distribution, n.version) if p) or "-"
            rows.append((
                n.region or "(whole)", n.backend, made, n.payload_version or "-",
                r.status + (f": {r.detail}" if r.detail else ""),
                r.fallback or (r.fallback_note if not r.ok else "-"),
            ))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = [f"check {self.file} on {self.target}" + (f" (fallback {self.fallback})" if self.fallback else "")]
        lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
        verdict = "OK: every region can run" if self.ok else "NOT OK: some region cannot run"
        if self.ok and not all(r.ok for r in self.regions):
            verdict += " (some on the fallback)"
        lines.append(verdict)
        return "\n".join(lines)


def check(
    file: str | os.PathLike[str] | bytes | Any,
    target: str | os.PathLike[str] | Target | list | None = None,
    *,
    fallback: str | None = None,
) -> CheckReport:
    """Pre-flight ``file`` (a path, file bytes, or a module object) without compiling anything.

    ``target`` is ``None`` (this machine), a path to the JSON ``lowerkit backends --json``
    printed on the target, its decoded JSON, or a :class:`Target`. ``fallback="reference"``
    counts a region whose backend cannot run as covered when the file kept its original
    module and ``reference`` runs on the target. The report is truthy when the file can run.
    """
    if fallback not in FALLBACKS:
        raise InputError(f"fallback must be None or 'reference', got {fallback!r}")
    if isinstance(file, (str, os.PathLike)):
        name, needs = os.fspath(file), read_needs(file)
    elif isinstance(file, bytes):
        name, needs = "<bytes>", read_needs(file)
    else:
        name, needs = getattr(file, "name", type(file).__name__), needs_of(file)
    if target is None:
        where = local_target()
    elif isinstance(target, Target):
        where = target
    elif isinstance(target, list):
        where = parse_target(target)
    else:
        where = load_target(target)
    return CheckReport(name, where.description, fallback, [_region(n, where) for n in needs])


def _region(need: Need, target: Target) -> RegionCheck:
    status, detail = _status(need, target.backends.get(need.backend))
    ok = status == "ok"
    fb, fb_note = "", ""
    if not ok:
        if not need.has_original:
            fb_note = "none: the file keeps no original (lower with keep_source=True)"
        else:
            ref_status, ref_detail = _status(Need("", "reference"), target.backends.get("reference"))
            if ref_status == "ok":
                fb = "reference (kept original)"
            else:
                fb_note = f"none: reference is {ref_status}" + (f" ({ref_detail})" if ref_detail else "")
    return RegionCheck(need, ok, status, detail, fb, fb_note)


def _status(need: Need, b: TargetBackend | None) -> tuple[str, str]:
    if b is None:
        made = f"=={need.version}" if need.version else ""
        what = f"{need.distribution}{made}" if need.distribution else f"the package providing {need.backend!r}"
        return "missing", f"install {what}"
    if b.error:
        return "broken", b.error
    if b.available is False:
        return "unavailable", b.note or "its lowerkit_is_available() is false"
    if need.payload_version and b.payload_versions is not None and need.payload_version not in b.payload_versions:
        made = " ".join(p for p in (need.distribution, need.version) if p)
        return (
            "incompatible payload",
            f"payload version {need.payload_version} (made by {made or 'an unknown version'}); "
            f"{' '.join(p for p in (b.distribution or need.backend, b.version) if p)} on the target "
            f"reads {list(b.payload_versions)}",
        )
    return "ok", ""
