"""The allocator priming (pb_accountant/_memory.py): one untouched block below glibc's
ceiling for its adaptive mmap threshold, freed once per process before the first
composition."""
import subprocess
import sys
import threading
import types

import numpy as np

import pb_accountant._memory as memory
from pb_accountant import PrivacyBucketsAccountant
from pb_accountant.composition import Composer

#: glibc's ceiling for the dynamic mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
#: and its initial threshold
GLIBC_DYNAMIC_CEILING = 32 * 2 ** 20
GLIBC_INITIAL_THRESHOLD = 128 * 2 ** 10


def _spy(monkeypatch):
    sizes = []

    def empty(n, *args, **kwargs):
        sizes.append(n)
        return np.empty(n, *args, **kwargs)

    monkeypatch.setattr(memory, "np", types.SimpleNamespace(empty=empty))
    monkeypatch.setattr(memory, "_primed", False)
    return sizes


def test_the_block_lies_where_glibc_raises_its_threshold():
    # freed, it raises the threshold only if it was mapped (above the initial threshold)
    # and its chunk (the block, a header and page rounding) is at most the ceiling
    assert GLIBC_INITIAL_THRESHOLD < memory.PRIMING_BLOCK_BYTES
    assert memory.PRIMING_BLOCK_BYTES + 2 * 4096 <= GLIBC_DYNAMIC_CEILING
    assert memory.PRIMING_BLOCK_BYTES % 8 == 0


def test_the_first_composer_primes_once_per_process(monkeypatch):
    sizes = _spy(monkeypatch)
    Composer()
    assert sizes == [memory.PRIMING_BLOCK_BYTES // 8]
    Composer()
    PrivacyBucketsAccountant()
    assert sizes == [memory.PRIMING_BLOCK_BYTES // 8]
    assert memory.prime_allocator() is False


def test_threads_prime_once(monkeypatch):
    sizes = _spy(monkeypatch)
    results = []
    start = threading.Barrier(8)

    def one():
        start.wait()
        results.append(memory.prime_allocator())

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 7 + [True]
    assert len(sizes) == 1


_CHILD = """
import sys
import pb_accountant._memory as memory
memory._primed = sys.argv[1] == "skip"          # (primed already: the priming is skipped)
from pb_accountant import PrivacyBucketsAccountant
acc = PrivacyBucketsAccountant()
acc.history = [(1.1, 0.01, 300), (0.9, 0.02, 50), (0.7, 1e-4, 20000)]
b = acc.get_epsilon_bounds(1e-9)
print(b.lower.hex(), b.upper.hex(), memory._primed)
"""


def test_fresh_processes_give_the_same_bits_with_and_without_the_priming():
    out = [subprocess.run([sys.executable, "-c", _CHILD, mode], capture_output=True,
                          text=True, check=True).stdout.split()
           for mode in ("skip", "prime")]
    assert out[0][:2] == out[1][:2]
    assert out[0][2] == out[1][2] == "True"


def test_an_address_space_limit_leaves_the_queries_as_they_were(monkeypatch):
    def refuse(n, *args, **kwargs):
        raise MemoryError("no address space")

    monkeypatch.setattr(memory, "np", types.SimpleNamespace(empty=refuse))
    monkeypatch.setattr(memory, "_primed", False)
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.0, 0.01, 100)]
    assert 0.0 < acc.get_epsilon(1e-5) < 10.0
    assert memory._primed and memory.prime_allocator() is False
