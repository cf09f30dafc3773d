"""How the user asked a ``%%gpu`` cell to be batched (:class:`BatchOptions`), checked when
made: from the magic's text (:meth:`BatchOptions.parse`) or from Python alike.

:mod:`cupy_magic.run.batching` plans the batches from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..units import SizeError, format_bytes, parse_size, short_repr, whole
from .errors import CellError
from .reduce import RULES

__all__ = ["DEFAULT_STREAMS", "MAX_STREAMS", "RULES", "BatchOptions"]

DEFAULT_STREAMS = 3
# Each stream holds one batch in flight (its input, its results and a staging buffer), so
# streams cost memory; past a few, more only queue on the same copy engines.
MAX_STREAMS = 64


@dataclass(frozen=True)
class BatchOptions:
    """How the user asked a cell to be batched (``%%gpu --batch ...``).

    Parameters
    ----------
    names
        The inputs to batch (a tuple, or ``"x,y"`` as ``--batch`` writes them); ``None``
        lets the planner choose.
    forced
        Batch even when the inputs fit the budget.
    rows, nbytes
        A fixed batch size in rows or in input bytes per batch (at most one of them);
        ``nbytes`` also takes a size as ``--batch-bytes`` writes it (``"512MB"``).
    streams
        CUDA streams (batches in flight).
    reduce
        ``{result name: rule}`` for results without a row axis; rules are :data:`RULES`.
    timeline
        Record each batch's start and end on the device (:attr:`BatchPlan.timeline`), and
        report them and the run's phases. On a GPU this uses CUDA timing events, and the GPU
        waits for the work ahead of each to finish before it writes the time: batches on
        different streams then overlap less, so leave it off when speed matters.
    graph
        Let a run on a GPU replay its batches' work as CUDA graphs where that pays and is
        safe (:mod:`cupy_magic.run.graphs`); ``False`` (``--no-graph``) launches every batch
        op by op.
    """

    names: tuple[str, ...] | None = None
    forced: bool = False
    rows: int | None = None
    nbytes: int | None = None
    streams: int = DEFAULT_STREAMS
    reduce: dict[str, str] = field(default_factory=dict)
    timeline: bool = False
    graph: bool = True
    # whether the user wrote the stream count (a configured default is no option given);
    # None: given when it differs from DEFAULT_STREAMS
    streams_given: bool | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        """Refuse options of the wrong kind or out of range, naming the value and the fix;
        ``names`` (any iterable of names) is kept as a tuple."""
        if self.names is not None:
            if isinstance(self.names, str):
                names = tuple(split_names(self.names))
            elif isinstance(self.names, (tuple, list)):
                names = tuple(self.names)
            else:
                names = ()
            if not names or not all(isinstance(n, str) and n.isidentifier() for n in names):
                raise CellError(f"--batch takes comma-separated input names, got "
                                f"{short_repr(self.names)}; "
                                "e.g. %%gpu --batch x,y (BatchOptions(names=('x', 'y')))")
            object.__setattr__(self, "names", names)
        for flag, value in (("forced", self.forced), ("timeline", self.timeline),
                            ("graph", self.graph)):
            if not isinstance(value, bool):
                raise CellError(f"BatchOptions({flag}={short_repr(value)}) is not True or "
                                f"False; e.g. BatchOptions({flag}=True)")
        _check_count("--streams", self.streams, str(DEFAULT_STREAMS))
        if self.streams > MAX_STREAMS:
            raise CellError(f"--streams {self.streams} is too many: at most {MAX_STREAMS}, "
                            "since each stream holds a batch in flight in memory; try "
                            f"%%gpu --streams {DEFAULT_STREAMS} "
                            f"(BatchOptions(streams={DEFAULT_STREAMS}))")
        if self.rows is not None:
            _check_count("--batch-rows", self.rows, "100000")
        if isinstance(self.nbytes, str):  # --batch-bytes's text, as set_budget reads it
            object.__setattr__(self, "nbytes", _size(self.nbytes))
        if self.nbytes is not None:
            _check_count("--batch-bytes", self.nbytes, "512MB")
        if self.rows is not None and self.nbytes is not None:
            raise CellError(f"give --batch-rows ({self.rows}) or --batch-bytes "
                            f"({format_bytes(self.nbytes)}), not both; e.g. %%gpu --batch-rows "
                            f"{self.rows} (BatchOptions(rows={self.rows}))")
        if not isinstance(self.reduce, dict):
            raise CellError(f"BatchOptions(reduce={short_repr(self.reduce)}) is not a dict of "
                            "result name to rule; e.g. BatchOptions(reduce={'total': 'sum'})")
        for name, rule in self.reduce.items():
            if not (isinstance(name, str) and name.isidentifier()):
                raise CellError(f"--reduce takes NAME=RULE, got the name {short_repr(name)}; e.g. "
                                "--reduce total=sum (BatchOptions(reduce={'total': 'sum'}))")
            if rule not in RULES:
                raise CellError(f"--reduce {name}={short_repr(rule)}: unknown rule; choose one of "
                                f"{', '.join(RULES)}, e.g. --reduce {name}=sum "
                                f"(BatchOptions(reduce={{{name!r}: 'sum'}}))")

    def fixed_rows(self, row_bytes: int) -> int | None:
        """Rows every batch takes as asked (``rows``, or as many as ``nbytes`` holds of
        ``row_bytes`` bytes each); ``None`` when the size is left to the run.

        Raises
        ------
        CellError
            When ``nbytes`` is less than one row.
        """
        if self.rows is not None or self.nbytes is None:
            return self.rows
        if self.nbytes < row_bytes:
            raise CellError(f"--batch-bytes {format_bytes(self.nbytes)} is less than one row "
                            f"of the batched inputs ({format_bytes(row_bytes)}); the smallest "
                            f"that works is --batch-bytes {row_bytes}B, one row a batch "
                            f"(BatchOptions(nbytes={row_bytes}) from Python)")
        return self.nbytes // max(row_bytes, 1)

    @property
    def requested(self) -> bool:
        """Whether the user asked for batching (rather than the budget forcing it)."""
        return self.forced or self.rows is not None or self.nbytes is not None

    @classmethod
    def parse(cls, batch: str | None = None, rows: str | None = None,
              nbytes: str | None = None, streams: str | None = None,
              reduce: list[str] | None = None, timeline: bool = False,
              default_streams: int = DEFAULT_STREAMS, graph: bool = True) -> BatchOptions:
        """Build options from the text of the magic's arguments.

        ``batch`` is ``None`` (not given), ``"*"`` (``--batch`` alone) or ``"a,b"``;
        ``default_streams`` is used when ``streams`` is not given; ``graph=False`` is
        ``--no-graph``.
        Raises :class:`CellError` with a one-line message naming the value and the fix.
        """
        names: tuple[str, ...] | None = None
        if batch not in (None, "*"):
            names = batch  # type: ignore[assignment]  # split and checked when made
        n_rows = _whole("--batch-rows", rows, "100000") if rows is not None else None
        n_bytes = None
        if nbytes is not None:
            n_bytes = _size(nbytes)
        n_streams = (_whole("--streams", streams, str(DEFAULT_STREAMS))
                     if streams is not None else default_streams)
        rules: dict[str, str] = {}
        for item in reduce or []:
            for part in (p.strip() for p in item.split(",")):
                if not part:
                    continue
                name, eq, rule = part.partition("=")
                name, rule = name.strip(), rule.strip().lower()
                if not eq or not name.isidentifier() or not rule:
                    raise CellError(f"--reduce takes NAME=RULE, got {part!r}; e.g. "
                                    "--reduce total=sum")
                if rules.get(name, rule) != rule:
                    raise CellError(f"--reduce gives {name} two rules, {rules[name]} and "
                                    f"{rule}; keep one, e.g. --reduce {name}={rules[name]}")
                rules[name] = rule
        return cls(names, batch is not None, n_rows, n_bytes, n_streams, rules, timeline,
                   graph, streams_given=streams is not None)

    @property
    def streams_typed(self) -> bool:
        """Whether ``--streams`` was given (from Python: a count other than the default)."""
        return self.streams != DEFAULT_STREAMS if self.streams_given is None \
            else self.streams_given

    def batch_only(self) -> list[str]:
        """The options given that only a batched run uses (for the note when a cell ran whole)."""
        given = [f"--streams {self.streams}"] if self.streams_typed else []
        given += [f"--reduce {n}={r}" for n, r in self.reduce.items()]
        if self.names and not self.forced:  # names without forced=True: from Python only
            given.append(f"BatchOptions(names={self.names!r}) without forced=True")
        return given + (["--timeline"] if self.timeline else []) \
            + ([] if self.graph else ["--no-graph"])


def split_names(text: str) -> list[str]:
    """The names of ``--batch x,y`` or ``--to-host y,total`` text (blanks dropped)."""
    return [n.strip() for n in text.split(",") if n.strip()]


# Each count's keyword of BatchOptions, for the Python form of a fix
_KEYWORDS = {"--streams": "streams", "--batch-rows": "rows", "--batch-bytes": "nbytes"}


def _both(flag: str, example: str) -> str:
    """The fix in both forms: ``%%gpu --batch-rows 100000 (BatchOptions(rows=100000))``."""
    value = repr(example) if flag == "--batch-bytes" else example
    return f"%%gpu {flag} {example} (BatchOptions({_KEYWORDS[flag]}={value}))"


def _size(text: str) -> int:
    """``--batch-bytes``'s text (``"512MB"``) as bytes, or a :class:`CellError` naming it."""
    try:
        return parse_size(text)
    except SizeError as exc:
        problem = str(exc).partition("; ")[0]
        raise CellError(f"--batch-bytes {text}: {problem}; e.g. {_both('--batch-bytes', '512MB')}"
                        ) from None


def _check_count(flag: str, value: object, example: str) -> None:
    """Refuse a count (streams, rows, bytes) that is no whole number of at least 1."""
    if whole(value) is None:
        raise CellError(f"{flag} takes a whole number, got {short_repr(value)}; e.g. "
                        f"{_both(flag, example)}")
    if value < 1:
        raise CellError(f"{flag} must be at least 1, got {value}; e.g. {_both(flag, example)}")


def _whole(flag: str, text: str, example: str) -> int:
    try:
        return int(text.replace("_", ""))
    except ValueError:
        raise CellError(f"{flag} takes a whole number, got {text!r}; e.g. "
                        f"{_both(flag, example)}") from None
