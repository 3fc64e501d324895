"""A saved fuzz case read back: every record kind, batches and validation calls alike.

Above both record modules (:mod:`.strategies` holds the batches, :mod:`.calls` the
validation calls, which are built from batches), so neither needs the other's reader.
"""

from __future__ import annotations

import json

from specbound.spec import SpecArgumentError

from .calls import call_from_json
from .strategies import KvCase, TreeCase


def case_from_json(text: str):
    """Inverse of ``to_json`` for every record (the ``kind`` field tells which): the
    batches of :mod:`.strategies` and the validation calls of :mod:`.calls`."""
    data = json.loads(text)
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind == "tree":
        return TreeCase(**data)
    if kind == "kv":
        return KvCase(**data)
    call = call_from_json(data) if kind else None
    if call is not None:
        return call
    raise SpecArgumentError("--replay", f"not a fuzz case: kind must be 'tree', 'kv', 'tree_call', 'kv_call' "
                                        f"or 'verify_mask', got {kind!r}")
