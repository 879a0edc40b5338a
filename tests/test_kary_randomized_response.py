"""k-ary randomized response (dp_accounting's RandomizedResponseDpEvent, REPLACE_ONE):
the adapter's pair is certified for the exact mechanism, not only for its rounded
masses (``KaryRandomizedResponse``): every stored mass lies within the error the engine
counts, each atom's loss within its loss error, and the composed bounds bracket the
exact delta of the multinomial composition (50-digit mpmath)."""
import math
import warnings
from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest

from pb_accountant.mechanisms import KaryRandomizedResponse

from _closed_form import multinomial_atoms

dp_event = pytest.importorskip("dp_accounting.dp_event")
from dp_accounting.privacy_accountant import NeighboringRelation  # noqa: E402

from pb_accountant.dp_accounting_adapter import PrivacyBucketsDpAccountant  # noqa: E402

REPLACE_ONE = NeighboringRelation.REPLACE_ONE

#: (p, k): rounded masses off their exact values in every direction, a rest computed by
#: cancellation in the old construction (k = 1000), p near 1 and tiny, a subnormal p/k
PAIRS = [(0.3, 3), (0.1, 7), (0.2, 1000), (0.999, 10), (1.0 - 2.0 ** -30, 4), (0.7, 2),
         (1e-9, 2), (0.09351615211117938, 2), (2.6943166906199663e-07, 1000),
         (1e-310, 2), (1.0, 5)]


def _exact_masses(p, k):
    """(stay, other, rest) of the double p as fractions."""
    q = Fraction(p)
    return 1 - q + q / k, q / k, q * (k - 2) / k


def _mpf(fraction):
    return mp.mpf(fraction.numerator) / fraction.denominator


def _adapter_pair(p, k):
    """The pair the adapter builds for RandomizedResponseDpEvent(p, k)."""
    pair, error, non_private = PrivacyBucketsDpAccountant(REPLACE_ONE)._leaf_pair(
        dp_event.RandomizedResponseDpEvent(p, k))
    assert error is None and not non_private
    return pair


@pytest.mark.parametrize("p,k", PAIRS)
def test_the_adapter_s_masses_and_their_errors_cover_the_exact_ones(p, k):
    """Each atom alone in an interval: |stored - exact| <= the certified error (it was 0
    beyond the sums' round-off: 131 of 300 random events had a mass outside it)."""
    pair = _adapter_pair(p, k)
    stay, other, rest = _exact_masses(p, k)
    with mp.workdps(50):
        loss = float(mp.log(_mpf(stay) / _mpf(other)))
    if loss == 0.0:
        cuts, want_a, want_b = np.array([0.0]), [stay + other + rest, 0], [stay + other + rest, 0]
    else:
        cuts = np.array([-1.5, -0.5, 0.5, 1.5]) * loss
        want_a, want_b = [0, other, rest, stay, 0], [0, stay, rest, other, 0]
    for mirrored in (pair, pair.mirrored()):
        a, b, ea, eb = mirrored.bucket_masses_with_error(cuts)
        if mirrored.swapped and loss != 0.0:
            # (loss 0 lies in (-inf, 0] in both orientations: an exact loss on a grid
            # point is decided (helper 41); before, an error of 1 covered either side)
            want_a, want_b = want_b[::-1], want_a[::-1]
        for masses, errors, wanted in ((a, ea, want_a), (b, eb, want_b)):
            for m, e, w in zip(masses.tolist(), errors.tolist(), wanted):
                assert abs(Fraction(m) - w) <= Fraction(e), (p, k, m, float(w), e)


@pytest.mark.parametrize("p,k", PAIRS)
def test_the_loss_bounds_cover_the_exact_loss(p, k):
    stay, other, _ = _exact_masses(p, k)
    with mp.workdps(50):
        exact = mp.log(_mpf(stay) / _mpf(other))
    lo, hi = _adapter_pair(p, k).loss_bounds()
    assert lo <= -exact and exact <= hi


def _exact_delta_of(p, k, r):
    """delta(eps) of r steps at 50 digits (the multinomial composition, both directions
    alike), and the exact per-step loss."""
    with mp.workdps(50):
        stay, other, rest = (_mpf(m) for m in _exact_masses(p, k))
        terms = multinomial_atoms(stay, other, rest, r)
        step = mp.log(stay / other)

    def delta(eps):
        with mp.workdps(50):
            e = mp.exp(mp.mpf(eps))
            return mp.fsum(a - e * b for a, b in terms if a > e * b)

    return delta, step


@pytest.mark.parametrize("p,k,r", [(0.3, 3, 4), (0.999, 10, 6), (0.2, 1000, 5), (0.7, 2, 8),
                                   (1e-9, 2, 3), (0.05, 7, 3)])
def test_composed_bounds_bracket_the_exact_delta(p, k, r):
    """At every atom of the composed loss (and an ulp either side) and between them: no
    tolerance on the bracket.  Where delta is not tiny the bracket stays informative
    (within 10% of it: the grid rounds a loss atom onto a neighbouring point; the widest
    here, 6.3%, is the rounded masses' bracket's too, to 1e-11)."""
    acc = PrivacyBucketsDpAccountant(REPLACE_ONE)
    acc.compose(dp_event.SelfComposedDpEvent(dp_event.RandomizedResponseDpEvent(p, k), r))
    delta, step = _exact_delta_of(p, k, r)
    eps = set()
    for j in range(r + 1):
        x = float(j * step)
        eps |= {x, math.nextafter(x, 0.0), math.nextafter(x, math.inf), float((j + 0.5) * step)}
    eps = sorted(eps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        db = acc.get_delta_bounds(eps)
    for e, low, up in zip(eps, db.lower.tolist(), db.upper.tolist()):
        exact = delta(e)
        assert low <= exact <= up, (e, low, float(exact), up)
        if exact > 1e-6:
            assert up - low <= 0.1 * exact, (e, low, float(exact), up)
    for target in (1e-3, 1e-6):
        eb = acc.get_epsilon_bounds(target)
        assert delta(eb.upper) <= target
        assert eb.lower == 0.0 or delta(math.nextafter(eb.lower, 0.0)) > target


def test_a_mass_that_rounds_to_zero_is_refused():
    """p / k at most 2^-1075: the stored pair would distinguish the inputs for sure (a
    delta lower bound of 0.99999 at epsilon 800, where the exact delta is 0: the loss is
    at most 745.6); the event is reported unsupported with the reason."""
    acc = PrivacyBucketsDpAccountant(REPLACE_ONE)
    event = dp_event.RandomizedResponseDpEvent(5e-324, 3)
    assert not acc.supports(event)
    with pytest.raises(ValueError, match="noise_parameter / num_buckets"):
        KaryRandomizedResponse.of(5e-324, 3)


def test_the_pair_checks_its_arguments():
    with pytest.raises(ValueError, match="noise_parameter"):
        KaryRandomizedResponse.of(1.5, 3)
    with pytest.raises(ValueError, match="num_buckets"):
        KaryRandomizedResponse.of(0.5, 1)
    with pytest.raises(ValueError, match="rounded masses"):
        KaryRandomizedResponse((0.9, 0.05, 0.05), (0.05, 0.9, 0.05), noise_parameter=0.15,
                               num_buckets=3)
    pair = KaryRandomizedResponse.of(0.3, 3)
    assert pair.mirrored().mirrored() == pair
