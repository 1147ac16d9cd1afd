"""Testing helpers for backend authors: the conformance kit and single-op modules.

``BackendConformance`` is a pytest base class; subclass it with ``backend_name`` and
``supported_ops`` in your backend's tests (see docs/writing-a-backend.md). Importing this
package needs pytest.
"""

from __future__ import annotations

from .cases import OP_CASES, OpCase, case_module, cases_for
from .conformance import BackendConformance

__all__ = ["OP_CASES", "BackendConformance", "OpCase", "case_module", "cases_for"]
