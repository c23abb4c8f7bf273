"""to_dict/from_dict for the dataclasses of a run's files (explanation.py, memory.py): what they write is
plain JSON, and what they read back is lenient, as a reader of files from other versions (or hands) must be."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, ClassVar


class Data:
    """to_dict/from_dict for the dataclasses below. `_nested` maps a field to the class of its
    value (or of each element, for a list)."""

    _nested: ClassVar[dict[str, type]] = {}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            out[f.name] = to_plain(value)
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Any:
        """Read what to_dict wrote. Lenient, as a reader of files from other versions (or hands) must be:
        unknown keys are ignored; a nested value or list item of the wrong shape is dropped and its field
        keeps its default; a field that is missing and has no default is None."""
        data = data if isinstance(data, dict) else {}
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            value = data.get(f.name, _ABSENT)
            sub = cls._nested.get(f.name)
            if sub is not None and value is not _ABSENT:
                value = _read_nested(sub, value, has_default, f.default_factory is list)
            if value is not _ABSENT:
                kwargs[f.name] = value
            elif not has_default:
                kwargs[f.name] = None
        return cls(**kwargs)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)


_ABSENT = object()


def _read_nested(sub: Any, value: Any, has_default: bool, is_list: bool) -> Any:
    """A nested field's value read with `sub.from_dict`: a list keeps its dict items, a dict is read,
    None stays None (an empty list for a list field); anything else is _ABSENT (the field's default),
    or `sub` read from nothing."""
    if isinstance(value, list):
        return [sub.from_dict(v) for v in value if isinstance(v, dict)]
    if isinstance(value, dict) and not is_list:
        return sub.from_dict(value)
    if value is None and not is_list:
        return None
    return _ABSENT if has_default else sub.from_dict({})


def to_plain(value: Any) -> Any:
    if isinstance(value, Data):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    return value
