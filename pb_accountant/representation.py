"""The interface every bucket representation implements (docs/method.md §9).

A representation stores one composition on a ``Grid`` as rows of masses (so that
composition is one batched convolution per row, paper Definition 4) together with
certified l1 error bounds and the infinity bucket.  Everything the composition layer
and the engine need goes through this interface: the engine never reads a row index
or an error-vector index, it only combines the *curves* a representation yields
(objects of :mod:`pb_accountant.queries`, each a certified delta(eps) bound of one
neighbouring direction).  Modelled on dp_accounting's PMF classes (compose, query)
and prv_accountant's discretiser/composer split, in the paper's vocabulary.

Adding a representation means one subclass plus one entry in
``pb_accountant.composition.REPRESENTATIONS``.
"""
from __future__ import annotations

import abc
import dataclasses
from typing import ClassVar, Dict, Optional, Tuple

import numpy as np

#: neighbouring directions: A||B ("ab") and B||A ("ba")
DIRECTIONS = ("ab", "ba")


class BucketRepresentation(abc.ABC):
    """Rows of bucket masses on ``grid`` with certified error bounds.

    Subclasses are frozen dataclasses: every operation returns a new object, nothing is
    cached on an instance after construction (caches live in the ``Composer``).
    """

    #: method name under which the engine reports this representation's curves
    method: ClassVar[str]
    #: the names in ``methods`` that ask for it (e.g. one direction only)
    variants: ClassVar[Tuple[str, ...]]
    #: True where the rows form e^{t} directly (f^i-scaled masses): the grid must then
    #: stay inside MAX_LOSS_RANGE (pb_accountant/buckets.py)
    forms_exponentials: ClassVar[bool] = False
    #: True where labels are only names that ``restricted`` re-centres on ``mean_loss``
    relabels: ClassVar[bool] = False
    #: True where ``from_product`` may take rows convolved in one batch with others
    batchable: ClassVar[bool] = True

    grid: "object"
    rows: np.ndarray
    compositions: int

    # -- construction -------------------------------------------------------------------
    @classmethod
    @abc.abstractmethod
    def leaves(cls, pair, grid, methods) -> tuple:
        """The leaf buckets of mechanism ``pair`` on ``grid`` that ``methods`` asks for
        (none, or one per stored direction)."""

    # -- composition ----------------------------------------------------------------
    @abc.abstractmethod
    def compose_full(self, other, tolerance: float = 0.0):
        """T1 x T2 with all 4n+1 indices kept (no corner rules yet); ``tolerance``:
        FFT round-off worth a finer split (pb_accountant/convolution.py)."""

    def row_tolerance(self, other, tolerance: float) -> np.ndarray:
        """``tolerance`` (round-off worth a finer split, in mass units) for each stored
        row of the product with ``other``, in the units the rows are stored in (here:
        the masses themselves)."""
        return np.full(len(self.rows), float(tolerance))

    @abc.abstractmethod
    def from_product(self, other, product):
        """The full product given the convolved rows of ``self.rows`` and
        ``other.rows`` with their round-off bounds (a ``convolution.RowProduct``; one
        batched transform for several representations)."""

    @abc.abstractmethod
    def squared(self):
        """The squaring operation T: f -> f^2, absolute index j -> ceil(j/2)."""

    @abc.abstractmethod
    def padded(self, n: int):
        """The same buckets on a grid with ``n`` >= current buckets (exact)."""

    @abc.abstractmethod
    def restricted(self, grid, mean_loss: Optional[Tuple[float, float]] = None):
        """The buckets on ``grid``, a window of the current grid (same factor, fewer
        buckets, see ``Grid.window``), with this representation's corner rules.
        ``mean_loss``: the composition's mean loss under A and under B, where
        representations whose labels are only names re-centre them (None: keep the
        labels)."""

    def compose(self, other):
        """T1 x T2 on this grid (corner rules of ``restricted``)."""
        full = self.compose_full(other)
        return full.restricted(full.grid.window(self.grid.number_of_buckets, 0))

    def placed(self, grid):
        """The same buckets on ``grid``, a grid of the same spacing holding every bucket
        of this one (exact: the new buckets are empty).  Used to add representations
        of disjoint event sets (pb_accountant/two_scale.py)."""
        g = self.grid
        start = (g.offset - g.number_of_buckets) - (grid.offset - grid.number_of_buckets)
        if grid.log_factor != g.log_factor or start < 0 or start + g.size > grid.size:
            raise ValueError(f"placed needs a grid of the same spacing holding {g!r}, "
                             f"got {grid!r}")
        rows = np.zeros((len(self.rows), grid.size))
        rows[:, start: start + g.size] = self.rows
        return dataclasses.replace(self, grid=grid, rows=rows)

    def columns(self, grid, lo: int, hi: int):
        """The same buckets with only positions lo..hi kept, on ``grid``: exact when
        every row is zero outside (used to crop emptied buckets)."""
        return dataclasses.replace(self, grid=grid, rows=self.rows[:, lo:hi + 1])

    # -- the infinity bucket and certified errors --------------------------------------
    @property
    @abc.abstractmethod
    def infinity_bucket(self) -> Tuple[float, float]:
        """(A-mass at loss +inf, B-mass at loss -inf): the infinity bucket of each
        direction (0.0 where the representation does not track one)."""

    @abc.abstractmethod
    def row_errors(self) -> Dict[str, float]:
        """Certified l1 error bound of every row, by row name."""

    # -- queries ------------------------------------------------------------------------
    @abc.abstractmethod
    def upper_curves(self) -> Dict[str, object]:
        """Certified upper bounds on delta(eps), by direction ("ab", "ba"); empty if the
        representation gives none."""

    @abc.abstractmethod
    def lower_curves(self) -> Dict[str, object]:
        """Certified lower bounds on delta(eps), by direction; empty if none."""
