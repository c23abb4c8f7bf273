"""The one terminal table every command prints (report, run, demo, explain, diff): a rich renderable that
lays itself out for the width it is printed at, by the rules beside the table specs in `_fmt.py`
(`fit_widths`): numbers are never cut, text columns narrow (names cut with "…", sentences wrapped, never
between a figure and its unit), then columns are left out in the table's documented order, and the title
says which; rows that leaving a column out would make read alike keep it (`distinguish`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from dynascope.console import wrap_text
from dynascope.render._fmt import FitCol, fit_widths, min_widths, table_width
from dynascope.render.table_specs import Col

NUMERIC_KINDS = ("id", "int", "us", "share", "ratio", "float", "bytes")


@dataclass
class Column:
    label: str
    numeric: bool
    min_width: int = 12
    max_width: int | None = None
    wrap: bool = False  # sentences: wrap at words; else a name, cut with "…"
    cut_start: bool = False  # a path: cut at its start, so that the file name stays ("…/ab/cdef.py")
    style: str | None = None
    justify: str | None = None  # default: numbers right, text left
    key: bool = False  # a number that names its row (an id, a step): it tells rows apart as text does

    @classmethod
    def of(cls, col: Col, style: str | None = None, cut_start: bool = False) -> Column:
        numeric = col.kind in NUMERIC_KINDS
        return cls(col.label, numeric, col.min_width, col.max_width, col.wrap, cut_start, style, key=col.kind == "id")

    @property
    def names(self) -> bool:
        """Whether its cells tell rows apart (text, or a number that is a key)."""
        return not self.numeric or self.key


@dataclass
class _Row:
    cells: list[Text]
    label: Text | None  # shown in the first column left in (a summary row's "median")
    style: str | None
    section: bool  # a line above it


def _widest(cell: Text) -> int:
    return max((cell_len(line) for line in cell.plain.split("\n")), default=0)


def _cut(cell: Text, width: int, at_start: bool) -> Text:
    """A one-line name in `width` cells: cut with "…" (at its start for a path)."""
    if cell_len(cell.plain) <= width:
        return cell
    if at_start and not cell.plain.startswith("("):  # a path, not a "(group of files)" line
        plain = cell.plain
        while cell_len(plain) > width - 1:
            plain = plain[1:]
        return Text("…" + plain, style=cell.style)
    cut = cell.copy()
    cut.truncate(width, overflow="ellipsis")
    return cut


def _cut_middle(cell: Text, width: int, others: list[str]) -> Text:
    """`cell` cut in its middle ("head…tail") to `width` cells, its tail long enough that it reads apart
    from each of `others` cut the same way (and back to a word's start where room allows)."""
    plain = cell.plain
    if len(plain) <= width or width < 5:
        return cell
    for tail in range(1, width - 3):
        if all(o == plain or o[-tail:] != plain[-tail:] or len(o) <= width for o in others):
            break
    seps = "_./ -:,("
    if plain[-tail] not in seps and plain[-tail - 1] not in seps:  # back to a word's start, where one is near
        tail = next((k for k in range(tail + 1, width // 2 + 1) if plain[-k] in seps), tail)
    head = width - 1 - tail
    return Text(plain[:head] + "…" + plain[-tail:], style=cell.style)


def _cut_column(cells: list[Text], width: int, at_start: bool) -> list[Text]:
    """A name column's cells cut to `width` (`_cut`); cells that the cut makes alike though they differ
    are cut in their middle instead (`_cut_middle`), so that each row still reads differently."""
    cut = [_cut(c, width, at_start) for c in cells]
    groups: dict[str, set[str]] = {}
    for c, full in zip(cut, cells, strict=True):
        groups.setdefault(c.plain, set()).add(full.plain)
    if at_start or all(len(g) == 1 for g in groups.values()):
        return cut
    out = []
    for c, full in zip(cut, cells, strict=True):
        alike = groups[c.plain]
        out.append(_cut_middle(full, width, sorted(alike - {full.plain})) if len(alike) > 1 else c)
    return out


@dataclass
class FitTable:
    """A table that fits the width it is printed at (see the module docstring). `drop` names column
    indexes, least important first; `title` and `row_count` as rich's Table has them."""

    title: str
    columns: list[Column]
    drop: Sequence[int] = ()
    rows: list[_Row] = field(default_factory=list)

    @property
    def row_count(self) -> int:
        return len(self.rows)

    def add_row(self, *cells: Text | str, label: Text | None = None, style: str | None = None,
                section: bool = False) -> None:  # fmt: skip
        self.rows.append(_Row([Text(c) if isinstance(c, str) else c for c in cells], label, style, section))

    def _fit_cols(self, first: int = 0, wider: dict[int, int] | None = None) -> list[FitCol]:
        """What fitting needs of each column; `wider`: text columns that must be at least this wide (their
        cut names would read alike)."""
        label = max((_widest(r.label) for r in self.rows if r.label is not None), default=0)
        fits = []
        for i, col in enumerate(self.columns):
            widest = max((_widest(r.cells[i]) for r in self.rows), default=0)
            if i == first:
                widest = max(widest, label)
            least, most, floor = col.min_width, col.max_width, 0
            if wider and i in wider:
                least, floor = max(least, wider[i]), wider[i]
                most = None if most is None else max(most, wider[i])
            fits.append(FitCol(cell_len(col.label), widest, col.numeric, least, most, floor))
        return fits

    def fits(self, width: int) -> bool:
        """Whether every column fits `width` columns, no text column narrower than its min_width."""
        return table_width(min_widths(self._fit_cols())) <= width

    def widths(self, width: int) -> list[int | None]:
        """Each column's width at `width` columns, None where it is left out. Where leaving columns out
        would print rows that read alike (`_alike`), the left-out column that tells most of them apart is
        kept (narrowed; the rule beside the drop orders in _fmt.py)."""
        keep: set[int] = set()
        wider: dict[int, int] = {}
        for _ in range(8 * len(self.columns) + 8):  # each round keeps a column or widens one: a bound
            widths = self._widths(width, keep, wider)
            grow = {i: w for i, w in self._too_cut(widths).items() if w > wider.get(i, 0)}
            if grow:  # a name column cut so short that rows read alike: at least as wide as tells them apart
                wider.update(grow)
                continue
            restore = self._telling_apart(widths)
            if restore is None or restore in keep:
                return widths
            keep.add(restore)
        return widths

    def _widths(self, width: int, keep: set[int], wider: dict[int, int]) -> list[int | None]:
        first = 0
        while True:
            widths = fit_widths(width, self._fit_cols(first, wider), self.drop, keep)
            now = next(i for i, w in enumerate(widths) if w is not None)
            if now == first:
                return widths
            first = now

    def _shown(self, widths: list[int | None]) -> list[list[Text]]:
        """Each column's cells as printed at `widths` (names cut), row by row; None-width columns as they are."""
        columns = []
        for i, col in enumerate(self.columns):
            cells = [r.cells[i] for r in self.rows]
            w = widths[i]
            if w is not None and not col.numeric and not col.wrap:
                cells = _cut_column(cells, w, col.cut_start)
            columns.append(cells)
        return [list(row) for row in zip(*columns, strict=True)] if columns else [[] for _ in self.rows]

    def _alike(self, widths: list[int | None]) -> list[list[int]]:
        """Groups of rows (indexes) whose text cells read the same as printed at `widths`."""
        shown = self._shown(widths)
        kept = [i for i, w in enumerate(widths) if w is not None and self.columns[i].names]
        groups: dict[tuple[str, ...], list[int]] = {}
        for n, row in enumerate(self.rows):
            if row.label is None:
                groups.setdefault(tuple(shown[n][i].plain for i in kept), []).append(n)
        return [g for g in groups.values() if len(g) > 1]

    def _too_cut(self, widths: list[int | None]) -> dict[int, int]:
        """The name columns whose cut cells make rows read alike though the names differ: the width each
        needs so that they read apart (cut in the middle where that is enough), at most its widest cell."""
        alike = self._alike(widths)
        need: dict[int, int] = {}
        for i, w in enumerate(widths):
            col = self.columns[i]
            if w is None or col.numeric or col.wrap:
                continue
            cells = [r.cells[i] for r in self.rows]
            differ = [g for g in alike if len({cells[n].plain for n in g}) > 1]
            if not differ:
                continue
            for wide in range(w + 1, max(_widest(c) for c in cells) + 1):
                cut = _cut_column(cells, wide, col.cut_start)
                if all(len({cut[n].plain for n in g}) == len({cells[n].plain for n in g}) for g in differ):
                    need[i] = wide
                    break
        return need

    def _telling_apart(self, widths: list[int | None]) -> int | None:
        """The most important left-out text column that tells apart rows that read alike at `widths` (their
        shown text cells the same), or None where no rows read alike or no left-out column tells them apart."""
        alike = self._alike(widths)
        if not alike:
            return None
        # the most important such column: the last in the drop order (one not in it is kept to the end)
        order = {i: k for k, i in enumerate(self.drop)}
        def tells(i: int) -> bool:
            return any(len({self.rows[n].cells[i].plain for n in g}) > 1 for g in alike)

        telling = [i for i, w in enumerate(widths) if w is None and self.columns[i].names and tells(i)]
        return max(telling, key=lambda i: order.get(i, len(order)), default=None)

    def left_out(self, width: int) -> list[str]:
        return [c.label for c, w in zip(self.columns, self.widths(width), strict=True) if w is None]

    def table(self, width: int) -> Table:
        """The rich Table laid out for `width` columns."""
        widths = self.widths(width)
        kept = [i for i, w in enumerate(widths) if w is not None]
        title = self.title
        gone = [self.columns[i].label or "(unnamed)" for i, w in enumerate(widths) if w is None]
        if gone:
            title += f" (not shown at this width: {', '.join(gone)})"
        table = Table(title=Text(title, style="bold"), title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for i in kept:
            col, w = self.columns[i], widths[i]
            table.add_column(col.label, justify=col.justify or ("right" if col.numeric else "left"),  # type: ignore[arg-type]
                             width=w, min_width=w, max_width=w, no_wrap=not col.wrap,
                             overflow="fold" if col.wrap else "ellipsis", style=col.style)  # fmt: skip
        first = kept[0] if kept else 0
        shown = self._shown(widths)
        for n, row in enumerate(self.rows):
            if row.section:
                table.add_section()
            cells = []
            for i in kept:
                col, w = self.columns[i], widths[i]
                cell = shown[n][i]
                if row.label is not None and i == first:
                    cell = row.label if col.numeric or col.wrap or w is None else _cut(row.label, w, False)
                elif col.wrap and w is not None:  # wrapped here: a figure keeps its unit on its line
                    cell = Text("\n").join(wrap_text(cell, w))
                cells.append(cell)
            table.add_row(*cells, style=row.style)
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.table(options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        widths = [w for w in self.widths(options.max_width) if w is not None]
        return Measurement(table_width(widths), table_width(widths))


def fit_table(title: str, columns: Iterable[Column], drop: Sequence[int] = ()) -> FitTable:
    return FitTable(title, list(columns), drop)
