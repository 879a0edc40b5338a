"""One accountant queried from many threads at once (docs/method.md §8).

Every answer must be bitwise the single-threaded answer, and the accountant must answer
correctly afterwards (its caches unpoisoned).  A tiny switch interval makes the threads
interleave inside the engine; the threads start together behind a barrier on a fresh
accountant, so they all build the same cached binary powers at the same time.
"""
import sys
import threading

import pytest

from pb_accountant import PrivacyBucketsAccountant

DELTA = 1e-5
HISTORY = [(1.0, 0.01, 4096)]
THREADS = 8
TRIALS = 3


def _queries():
    """(name, function of an accountant) pairs: every query kind the accountant has."""
    return [
        ("get_epsilon", lambda acc: acc.get_epsilon(DELTA)),
        ("get_epsilon_bounds", lambda acc: tuple(acc.get_epsilon_bounds(DELTA))),
        ("epsilon_after", lambda acc: acc.epsilon_after(
            DELTA, noise_multiplier=1.0, sample_rate=0.01, num_steps=1024).upper),
        ("get_delta", lambda acc: acc.get_delta(2.0)),
    ]


def _fresh():
    acc = PrivacyBucketsAccountant()
    acc.history = list(HISTORY)
    return acc


@pytest.fixture(scope="module")
def reference():
    """Single-threaded answers, each from its own fresh accountant."""
    return {name: query(_fresh()) for name, query in _queries()}


def _run_concurrently(acc, queries):
    barrier = threading.Barrier(len(queries))
    results = [None] * len(queries)
    errors = []

    def work(i, query):
        try:
            barrier.wait()
            results[i] = query(acc)
        except BaseException as exc:         # reported below, with the thread's query
            errors.append((i, repr(exc)))

    threads = [threading.Thread(target=work, args=(i, q)) for i, q in enumerate(queries)]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    return results, errors


@pytest.mark.parametrize("trial", range(TRIALS))
def test_concurrent_queries_are_bitwise_single_threaded(reference, trial):
    kinds = _queries()
    picked = [kinds[(i + trial) % len(kinds)] for i in range(THREADS)]
    acc = _fresh()
    results, errors = _run_concurrently(acc, [query for _, query in picked])
    assert errors == []
    for (name, _), got in zip(picked, results):
        assert got == reference[name], f"{name}: {got!r} != {reference[name]!r}"
    # unpoisoned: the same accountant answers every query correctly afterwards
    for name, query in kinds:
        assert query(acc) == reference[name], f"{name} after the threads"


def test_concurrent_steps_and_queries_keep_the_history_exact():
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.0, 0.01, 10)]

    def stepper(acc):
        for _ in range(200):
            acc.step(noise_multiplier=1.0, sample_rate=0.01)
        return None

    queries = [stepper] * 4 + [lambda a: a.get_epsilon(DELTA)] * 2
    results, errors = _run_concurrently(acc, queries)
    assert errors == []
    assert acc.history == [(1.0, 0.01, 810)]
    assert len(acc) == 810
    # each concurrent answer is the answer for some history the accountant had
    for eps in results[4:]:
        assert 0.0 < eps < float("inf")
    ref = PrivacyBucketsAccountant()
    ref.history = [(1.0, 0.01, 810)]
    assert acc.get_epsilon(DELTA) == ref.get_epsilon(DELTA)
