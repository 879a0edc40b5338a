"""Where budget records go: Python logging, CSV, JSON lines, TensorBoard.

A sink is anything with ``write(record)`` (and optionally ``close()``); a plain
callable ``fn(record)`` is accepted too.  The file sinks write each record as one
whole line with a single unbuffered write, so a crash loses nothing that was written
and never leaves a cut line (pass ``fsync=True`` to also survive an operating-system
crash).  A sink that raises is reported and disabled by the
:class:`~pb_accountant.integrations.BudgetTracker`; it never stops training.  The
library never configures logging handlers.
"""
from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
import warnings
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Optional

import numpy as np

from pb_accountant._validation import check_flag

from ._common import json_float

__all__ = ["BudgetRecord", "Sink", "LoggingSink", "CSVSink", "JSONLinesSink",
           "TensorBoardSink", "CallbackSink", "as_sink", "LOGGER_NAME"]

LOGGER_NAME = "pb_accountant"


@dataclass(frozen=True)
class BudgetRecord:
    """The privacy spent at one point of training.

    ``eps_lower``/``eps_upper`` are the certified bounds at ``delta`` after ``step``
    optimisation steps, for the accountant's ``sampler`` and ``neighbouring`` relation
    (issue 13: each number says what it assumes); ``noise_multiplier``/``sample_rate``
    those of the last step (None before the first).  ``event`` says what triggered the
    record: "step", "epoch", "stop" (the guard's look-ahead), "end" or "manual".

    ``loader_sampler`` is how the data loader that feeds training samples, when it was
    seen (None: not seen).  When it differs from ``sampler`` the bounds above are *not*
    certified for that loader: ``loader_eps_lower``/``loader_eps_upper`` then hold the
    bracket computed for the loader's sampler at the same history (None when it could
    not be computed; docs/which-epsilon.md), under ``loader_neighbouring``.
    """

    step: int
    epoch: Optional[int]
    delta: float
    eps_lower: float
    eps_upper: float
    noise_multiplier: Optional[float]
    sample_rate: Optional[float]
    event: str = "manual"
    time: float = field(default=0.0, compare=False)
    sampler: str = "poisson"
    neighbouring: str = "add_remove"
    loader_sampler: Optional[str] = None
    loader_eps_lower: Optional[float] = None
    loader_eps_upper: Optional[float] = None
    loader_neighbouring: Optional[str] = None

    @property
    def certified_for_loader(self) -> Optional[bool]:
        """True when the bounds were computed for the loader's sampler, False when not,
        None when the loader was not seen."""
        return None if self.loader_sampler is None else self.loader_sampler == self.sampler

    def assumption_text(self) -> str:
        """What ``eps_lower``/``eps_upper`` assume, in words (for logs and reports)."""
        text = f"sampler={self.sampler}, neighbouring={self.neighbouring}"
        if self.certified_for_loader is False:
            text += f"; NOT certified for the {self.loader_sampler} loader feeding training"
            if self.loader_eps_upper is not None:
                text += (f", which implies epsilon in [{_down(self.loader_eps_lower)}, "
                         f"{_up(self.loader_eps_upper)}] (sampler={self.loader_sampler}, "
                         f"neighbouring={self.loader_neighbouring})")
        return text

    def as_dict(self) -> dict:
        return asdict(self)

    def as_json_dict(self) -> dict:
        out = self.as_dict()
        for key in ("delta", "eps_lower", "eps_upper", "noise_multiplier", "sample_rate", "time",
                    "loader_eps_lower", "loader_eps_upper"):
            out[key] = json_float(out[key])
        return out


FIELDS = [f.name for f in fields(BudgetRecord)]


class Sink:
    """Base class: ``write(record)`` and ``close()``."""

    def write(self, record: BudgetRecord) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class CallbackSink(Sink):
    """Calls ``fn(record)`` for every record."""

    def __init__(self, fn: Callable[[BudgetRecord], Any]):
        self.fn = fn

    def write(self, record: BudgetRecord) -> None:
        self.fn(record)


class LoggingSink(Sink):
    """Logs every record on the logger "pb_accountant" (no handlers are installed).

    The record is attached to the ``LogRecord`` as ``budget`` (``extra={"budget": ...}``)
    for structured handlers.
    """

    def __init__(self, logger: Optional[logging.Logger] = None, level: int = logging.INFO):
        self.logger = logger or logging.getLogger(LOGGER_NAME)
        self.level = level

    def write(self, record: BudgetRecord) -> None:
        if not self.logger.isEnabledFor(self.level):
            return
        epoch = "-" if record.epoch is None else record.epoch
        self.logger.log(
            self.level,
            "privacy budget at step %d (epoch %s, %s): epsilon in [%s, %s] at delta=%s "
            "(noise_multiplier=%s, sample_rate=%s; %s)",
            record.step, epoch, record.event, _down(record.eps_lower), _up(record.eps_upper),
            _exact(record.delta),
            _short(record.noise_multiplier), _short(record.sample_rate),
            record.assumption_text(),
            extra={"budget": record.as_dict()})


def _short(x) -> str:
    return "-" if x is None else f"{x:.6g}"


def _up(x) -> str:
    """An upper bound as text: 6 digits rounded towards +inf (never shown below itself)."""
    from ._cli_render import up
    return up(x)


def _down(x) -> str:
    """A lower bound as text: 6 digits rounded towards -inf (never shown above itself)."""
    from ._cli_render import down
    return down(x)


def _exact(x) -> str:
    from ._cli_render import exact
    return exact(x)


def _float32(x: float, upward: bool) -> float:
    """``x`` as the float32 TensorBoard stores, rounded towards +inf (``upward``: an
    upper bound) or -inf (a lower bound) instead of to the nearest, so that the plotted
    bound is still a bound (an upper bound past the float32 range is inf: skipped)."""
    with np.errstate(over="ignore"):
        f = np.float32(x)
    if upward and float(f) < x:
        f = np.nextafter(f, np.float32(np.inf))
    elif not upward and float(f) > x:
        f = np.nextafter(f, np.float32(-np.inf))
    return float(f)


class _FileSink(Sink):
    """One record = one line, written with a single ``os.write`` of the whole line.

    The file is opened unbuffered in append mode; each record is encoded first and
    written in full (a short write is continued), then flushed to the operating
    system (``fsync=True`` also forces it to disk).  If a write fails midway the file
    is truncated back to the end of the last complete line, so the file never ends in
    a cut line, and the ``OSError`` is raised to the caller (a
    :class:`~pb_accountant.integrations.BudgetTracker` reports it and disables the
    sink; training goes on).
    """

    def __init__(self, path, fsync: bool = False, append: bool = True):
        fsync, append = check_flag("fsync", fsync), check_flag("append", append)
        self.path = os.fspath(path)
        self.fsync = fsync
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        self._fh = open(self.path, "ab" if append else "wb", buffering=0)
        # a file that ends in a cut line (an operating-system crash without fsync, another
        # writer): the first record starts on a line of its own, not glued to that one
        self._newline_first = append and self._ends_in_a_cut_line()

    def _ends_in_a_cut_line(self) -> bool:
        try:
            if self._size() == 0:
                return False
            with open(self.path, "rb") as fh:
                fh.seek(-1, os.SEEK_END)
                return fh.read(1) != b"\n"
        except OSError:
            return False

    @property
    def closed(self) -> bool:
        return self._fh.closed

    def _size(self) -> int:
        try:
            return os.fstat(self._fh.fileno()).st_size
        except OSError:
            return 0

    def _write_line(self, text: str) -> None:
        data = ("\n" if self._newline_first else "").encode("utf-8") + text.encode("utf-8")
        fd = self._fh.fileno()
        start = self._size()
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                if not written:                     # pragma: no cover - defensive
                    raise OSError(f"write to {self.path!r} made no progress")
                view = view[written:]
            if self.fsync:
                os.fsync(fd)
            self._newline_first = False
        except BaseException:
            try:                                    # never leave a cut line behind
                if self._size() > start:
                    os.ftruncate(fd, start)
            except OSError:
                pass
            raise

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()


class CSVSink(_FileSink):
    """One CSV row per record; the header is written with the first row of an empty file.

    ``append=False`` starts the file afresh (truncates it) instead of appending.  A file
    appended to keeps its own header: one written by an earlier version, with fewer
    columns, gets rows of its columns only (a warning names the columns left out); a
    header that is not this library's is refused (ValueError) before anything is
    written.
    """

    def __init__(self, path, fsync: bool = False, append: bool = True):
        header = _existing_header(path) if check_flag("append", append) else None
        if header is not None and not set(header) <= set(FIELDS):
            raise ValueError(
                f"path {os.fspath(path)!r} holds a CSV whose header {header!r} is not a "
                f"budget log's (columns {FIELDS!r}): appending would mix two tables; pass "
                "append=False or another path")
        super().__init__(path, fsync, append)
        self._fields = FIELDS if header is None else header
        if header is not None and header != FIELDS:
            # (rows of the full header had been written under the old one: the new
            # columns' values lay under no name, or under another column's)
            warnings.warn(f"{self.path!r} has the header of an earlier version: its rows "
                          f"are written without the columns "
                          f"{[f for f in FIELDS if f not in header]!r}", RuntimeWarning,
                          stacklevel=2)

    def write(self, record: BudgetRecord) -> None:
        row = {k: ("" if v is None else (repr(v) if isinstance(v, float) else v))
               for k, v in record.as_dict().items()}
        buffer = io.StringIO()
        if self._size() == 0:
            self._fields = FIELDS          # (a file emptied since: a header of its own)
        writer = csv.DictWriter(buffer, fieldnames=self._fields, lineterminator="\n",
                                extrasaction="ignore")
        if self._size() == 0:
            writer.writeheader()
        writer.writerow(row)
        self._write_line(buffer.getvalue())         # header (if new) and row: one write


def _existing_header(path) -> Optional[list]:
    """The header row of the regular CSV file at ``path``, None where there is none (no
    file, an empty one, one that cannot be read, or not a regular file: /dev/full reads
    zeros without end).  At most _HEADER_BYTES are read."""
    try:
        if not os.path.isfile(os.fspath(path)):
            return None
        with open(os.fspath(path), "rb") as fh:
            line = fh.readline(_HEADER_BYTES).decode("utf-8")
        first = next(csv.reader([line]), None)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    return first or None


#: the most of a CSV file's first line read for its header
_HEADER_BYTES = 1 << 16


class JSONLinesSink(_FileSink):
    """One JSON object per line; non-finite floats are written as "inf"/"nan".

    ``append=False`` starts the file afresh (truncates it) instead of appending.
    """

    def write(self, record: BudgetRecord) -> None:
        self._write_line(json.dumps(record.as_json_dict(), allow_nan=False) + "\n")


class TensorBoardSink(Sink):
    """Scalars ``<prefix>epsilon_lower``/``epsilon_upper`` (and the schedule) per step.

    What they assume is written once as the text ``<prefix>assumptions`` (sampler and
    neighbouring relation, and whether they match the loader that feeds training); when
    they do not match, the loader's own bracket goes to
    ``<prefix><loader sampler>/epsilon_lower`` and ``.../epsilon_upper``.

    Uses ``torch.utils.tensorboard.SummaryWriter`` (imported on first use): pass a
    ``log_dir`` or an existing ``writer``.  Non-finite values are skipped (TensorBoard
    cannot plot them); the bounds are rounded outward to the float32 TensorBoard
    stores (lower down, upper up), so a plotted bound is still a bound.  The writer is
    flushed after every record.
    """

    def __init__(self, log_dir=None, writer: Any = None, prefix: str = "privacy/",
                 log_schedule: bool = True):
        log_schedule = check_flag("log_schedule", log_schedule)
        if writer is None:
            from torch.utils.tensorboard import SummaryWriter  # lazy: torch only here
            writer = SummaryWriter(log_dir=None if log_dir is None else os.fspath(log_dir))
            self._owns_writer = True
        else:
            self._owns_writer = False
        self.writer = writer
        self.prefix = prefix
        self.log_schedule = log_schedule
        self._assumptions: Optional[str] = None

    @property
    def log_dir(self) -> Optional[str]:
        getter = getattr(self.writer, "get_logdir", None)
        return getter() if getter else None

    def write(self, record: BudgetRecord) -> None:
        # TensorBoard keeps float32: bounds are rounded outward to it (None: nearest)
        values = {"epsilon_lower": (record.eps_lower, False),
                  "epsilon_upper": (record.eps_upper, True)}
        if self.log_schedule:
            values["noise_multiplier"] = (record.noise_multiplier, None)
            values["sample_rate"] = (record.sample_rate, None)
        if record.certified_for_loader is False:
            tag = f"{record.loader_sampler}/"
            values[tag + "epsilon_lower"] = (record.loader_eps_lower, False)
            values[tag + "epsilon_upper"] = (record.loader_eps_upper, True)
        for name, (value, upward) in values.items():
            if value is None or not math.isfinite(value):
                continue
            if upward is not None:
                value = _float32(float(value), upward)
                if not math.isfinite(value):
                    continue
            self.writer.add_scalar(self.prefix + name, value, global_step=record.step)
        text = record.assumption_text().split(", which implies")[0]
        add_text = getattr(self.writer, "add_text", None)
        if text != self._assumptions and add_text is not None:
            add_text(self.prefix + "assumptions", f"epsilon_lower/epsilon_upper assume {text}",
                     global_step=record.step)
            self._assumptions = text
        self.writer.flush()

    def close(self) -> None:
        if self._owns_writer:
            self.writer.close()
        else:
            self.writer.flush()


def as_sink(obj: Any) -> Sink:
    """A sink object as is; a callable wrapped in :class:`CallbackSink`."""
    if hasattr(obj, "write"):
        return obj
    if callable(obj):
        return CallbackSink(obj)
    raise TypeError(f"a sink must have write(record) or be callable, got {type(obj).__name__}")
