"""The fast path of the general reader: a file's commonest line shapes, learned from its own lines, let
polars' CSV reader (multi-threaded) split the bulk of each chunk at commas; each piece is checked field
by field against the shape. Up to three shapes per file (ops, graph calls, regions). A line that fits
none exactly (metadata, escapes, commas inside strings, other layouts) is handed back for orjson.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import orjson
import polars as pl

from dynascope.analyze.read.lines import json_object
from dynascope.analyze.read.records import TOP_KEYS, phase_of

__all__ = ["LineTemplates", "lines_at"]

_MAX_TEMPLATES = 3
_LEARN_LINES = 300




@dataclass
class _Field:
    column: str  # output column
    pre: str  # text before the value in its comma-separated piece
    suf: str  # text after it
    kind: str  # "int", "str", "float"
    lowcard: bool = False  # an int with few distinct values: read as categories, mapped once each


class _Template:
    """The exact text shape of the commonest complete-event line of a file."""

    def __init__(self, fields: list[_Field]):
        self.fields = fields
        self.n = len(fields)

    @classmethod
    def commonest(cls, chunk: bytes) -> list[_Template]:
        """The commonest shapes of the complete-event lines among the first of `chunk`."""
        lines = chunk[: 1 << 19].split(b"\n", _LEARN_LINES)[:_LEARN_LINES]
        shapes: dict[tuple, list] = {}
        for raw in lines:
            raw = raw.strip()
            if not raw.startswith(b"{"):
                continue
            obj = json_object(raw)
            if obj is None or phase_of(obj.get("ph")) != "X":
                continue
            if obj.get("name") in ("start", "end"):
                continue
            fields = cls._fields(obj, raw)
            if fields is None:
                continue
            key = tuple((f.column, f.pre, f.suf, f.kind) for f in fields)
            entry = shapes.setdefault(key, [0, fields, [set() for _ in fields]])
            entry[0] += 1
            values = _field_values(obj)
            for seen, v in zip(entry[2], values, strict=True):
                if len(seen) <= 16:
                    seen.add(v)
        for count, fields, seen in shapes.values():
            for f, vals in zip(fields, seen, strict=True):
                f.lowcard = f.kind == "int" and count >= 32 and len(vals) <= 4
        ranked = sorted(shapes.values(), key=lambda v: -v[0])
        return [cls(fields) for count, fields, _ in ranked[:_MAX_TEMPLATES] if count >= 2]

    @staticmethod
    def _fields(obj: dict, raw: bytes) -> list[_Field] | None:
        fields: list[_Field] = []
        pieces: list[str] = []
        keys = list(obj)
        for k in keys:
            v = obj[k]
            if k == "args":
                if not isinstance(v, dict) or not v:
                    return None
                akeys = list(v)
                for j, ak in enumerate(akeys):
                    kind = _kind(v[ak])
                    if kind is None:
                        return None
                    col = ak if ak not in TOP_KEYS else f"arg_{ak}"
                    pre = ('"args":{' if j == 0 else "") + orjson.dumps(ak).decode() + ":"
                    suf = "}" if j == len(akeys) - 1 else ""
                    fields.append(_Field(col, pre, suf, kind))
            else:
                kind = _kind(v)
                if kind is None:
                    return None
                fields.append(_Field(k, orjson.dumps(k).decode() + ":", "", kind))
        if not fields:
            return None
        fields[0].pre = "{" + fields[0].pre
        fields[-1].suf += "}"
        # a string's quotes belong to pre/suf, so the value between is the bare text
        for f in fields:
            if f.kind == "str":
                f.pre += '"'
                f.suf = '"' + f.suf
        # the line must be exactly the pieces joined by commas
        values = []
        for k in keys:
            if k == "args":
                values.extend(obj["args"].values())
            else:
                values.append(obj[k])
        for f, v in zip(fields, values, strict=True):
            text = v if f.kind == "str" else orjson.dumps(v).decode()
            if f.kind == "str" and any(c in v for c in ',"\\'):
                return None
            if any(c in f.pre + f.suf for c in ",") or "," in text:
                return None
            pieces.append(f.pre + text + f.suf)
        if ",".join(pieces).encode() != raw:
            return None
        return fields

    def apply(self, raw: pl.DataFrame, keep: set | None) -> tuple[pl.DataFrame, pl.Series] | None:
        """Typed columns of the rows of `raw` (comma pieces c0, c1, ...) that fit, and the misfit mask."""
        n = self.n
        exprs = []  # typed values
        checks = []  # booleans on the raw pieces
        nonnull = []  # typed values that must not be null
        if f"c{n}" in raw.columns:
            checks.append(pl.col(f"c{n}").is_null())
        for i, f in enumerate(self.fields):
            c = pl.col(f"c{i}")
            categorical = raw.schema[f"c{i}"] == pl.Categorical
            if f.kind == "str" and categorical:
                cats = raw.get_column(f"c{i}").unique().drop_nulls().cast(pl.String).to_list()
                if len(cats) > 200_000:
                    return None
                old, new = [], []
                for s in cats:
                    if s.startswith(f.pre) and s.endswith(f.suf) and len(s) >= len(f.pre) + len(f.suf):
                        body = s[len(f.pre) : len(s) - len(f.suf)]
                        if '"' not in body and "\\" not in body:
                            old.append(s)
                            new.append(body)
                expr = c.replace_strict(old, new, default=None, return_dtype=pl.Categorical)
                nonnull.append(f.column)
            elif f.kind == "int" and categorical and raw.get_column(f"c{i}").n_unique() <= 4096:
                old, new = [], []
                for s in raw.get_column(f"c{i}").unique().drop_nulls().cast(pl.String).to_list():
                    if s.startswith(f.pre) and s.endswith(f.suf):
                        try:
                            new.append(int(s[len(f.pre) : len(s) - len(f.suf)]))
                        except ValueError:
                            continue
                        old.append(s)
                expr = c.replace_strict(old, new, default=None, return_dtype=pl.Int64)
                nonnull.append(f.column)
            else:
                if categorical:
                    c = c.cast(pl.String)
                lp, ls = len(f.pre), len(f.suf)
                checks.append(c.str.starts_with(f.pre))
                body = c.str.slice(lp) if not ls else c.str.slice(lp, c.str.len_bytes() - lp - ls)
                if ls:
                    checks.append(c.str.ends_with(f.suf))
                if keep is not None and f.column not in keep:
                    continue  # shape checked by the prefix; the value is not kept
                if f.kind == "str":
                    checks.append(~body.str.contains('"', literal=True) & ~body.str.contains("\\", literal=True))
                    expr = body.cast(pl.Categorical)
                else:
                    expr = body.cast(pl.Int64 if f.kind == "int" else pl.Float64, strict=False)
                    nonnull.append(f.column)
            exprs.append(expr.alias(f.column))
        out = raw.select(*exprs, pl.all_horizontal(checks).fill_null(False).alias("__ok"))
        ok_expr = pl.col("__ok")
        for col in nonnull:
            ok_expr = ok_expr & pl.col(col).is_not_null()
        if "ph" in out.columns:  # only complete events take the fast path
            ok_expr = ok_expr & pl.col("ph").cast(pl.String).is_in(["X", "1"])
        ok = out.select(ok_expr.alias("ok")).get_column("ok")
        out = out.drop("__ok").filter(ok)
        if "ph" in out.columns:
            out = out.drop("ph")
        return out, ~ok




class LineTemplates:
    """The commonest line shapes of a file, tried in order on one comma split of each chunk."""

    @classmethod
    def learn(cls, chunk: bytes) -> LineTemplates | None:
        """The shapes of `chunk`'s complete-event lines, or None when no shape repeats."""
        found = _Template.commonest(chunk)
        return cls(found) if found else None

    def __init__(self, templates: list[_Template]):
        self.templates = templates
        first = templates[0]
        width = max(t.n for t in templates) + 1
        # the first (commonest) shape decides the column types; the others cast what they need
        self.schema: dict[str, type[pl.DataType]] = {f"c{i}": pl.String for i in range(width)}
        for i, f in enumerate(first.fields):
            if f.kind == "str" or f.lowcard:
                self.schema[f"c{i}"] = pl.Categorical

    def parse(self, chunk: bytes, keep: set | None = None) -> tuple[list[pl.DataFrame], pl.Series] | None:
        """Typed frames of the lines that fit a shape, and the mask of lines that fit none."""
        try:
            raw = pl.read_csv(
                chunk,
                has_header=False,
                separator=",",
                quote_char=None,
                schema=self.schema,
                truncate_ragged_lines=True,
                missing_columns="insert",
                encoding="utf8-lossy",
            )
        except Exception:  # noqa: BLE001 - any CSV-level surprise: let orjson read this chunk
            return None
        res = self.templates[0].apply(raw, keep)
        if res is None:
            return None
        good, bad = res
        frames = [good]
        for t in self.templates[1:]:
            if not bad.any():
                break
            idx = bad.arg_true()
            sub = raw[idx]
            res = t.apply(sub, keep)
            if res is None:
                break
            g2, b2 = res
            if g2.height:
                frames.append(g2)
                bad = bad.scatter(idx, b2)
        return frames, bad


def lines_at(chunk: bytes, mask: pl.Series) -> list[bytes] | None:
    """The lines of `chunk` (which ends with a newline) where `mask` is true; None if counts differ."""
    idx = mask.arg_true().to_list()
    n = mask.len()
    if chunk.count(b"\n") != n:
        return None
    if idx and idx[-1] < 2000:  # only near the start (a file's header): walk the first lines
        lines = chunk.split(b"\n", idx[-1] + 1)
        if len(lines) < idx[-1] + 1:
            return None
        return [lines[i] for i in idx]
    if idx and idx[0] >= n - 2000:  # only near the end (the `end` record)
        back = n - idx[0]
        lines = chunk[:-1].rsplit(b"\n", back)
        if len(lines) < back:
            return None
        tail = lines[-back:]
        return [tail[i - (n - back)] for i in idx]
    nl = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10)
    arr = np.asarray(idx, dtype=np.int64)
    starts = np.concatenate(([0], nl[:-1] + 1))
    return [chunk[starts[i] : nl[i]] for i in arr.tolist()]


def _field_values(obj: dict) -> list:
    out: list = []
    for k, v in obj.items():
        if k == "args" and isinstance(v, dict):
            out.extend(v.values())
        else:
            out.append(v)
    return out


def _kind(v) -> str | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return None if (math.isnan(v) or math.isinf(v)) else "float"
    if isinstance(v, str):
        return "str"
    return None
