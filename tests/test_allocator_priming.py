"""The allocator priming (pb_accountant/_memory.py): one untouched block below glibc's
ceiling for its adaptive mmap threshold, freed once per process before the first
composition; and transforms that fall back to one thread where threads cannot start."""
import ctypes
import os
import pathlib
import subprocess
import sys
import textwrap
import threading
import types

import numpy as np
import pytest

import pb_accountant._memory as memory
import pb_accountant.convolution as convolution
from pb_accountant import PrivacyBucketsAccountant
from pb_accountant.composition import Composer

REPO = pathlib.Path(__file__).resolve().parent.parent
#: glibc's ceiling for the dynamic mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
#: and its initial threshold
GLIBC_DYNAMIC_CEILING = 32 * 2 ** 20
GLIBC_INITIAL_THRESHOLD = 128 * 2 ** 10


def _python(code: str, *args) -> str:
    """stdout of ``code`` in a fresh interpreter that imports this checkout."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          cwd=str(REPO), capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, check=True)
    return done.stdout


def _spy(monkeypatch):
    sizes = []

    def empty(n, *args, **kwargs):
        sizes.append(n)
        return np.empty(n, *args, **kwargs)

    monkeypatch.setattr(memory, "np", types.SimpleNamespace(empty=empty))
    monkeypatch.setattr(memory, "_primed", False)
    monkeypatch.setattr(memory, "_address_space_limited", lambda: False)
    return sizes


def test_the_block_lies_where_glibc_raises_its_threshold():
    # freed, it raises the threshold only if it was mapped (above the initial threshold)
    # and its chunk (the block, a header and page rounding) is at most the ceiling
    assert GLIBC_INITIAL_THRESHOLD < memory.PRIMING_BLOCK_BYTES
    assert memory.PRIMING_BLOCK_BYTES + 2 * 65536 <= GLIBC_DYNAMIC_CEILING
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


def test_a_process_with_an_address_space_limit_is_not_primed(monkeypatch):
    sizes = _spy(monkeypatch)
    monkeypatch.setattr(memory, "_address_space_limited", lambda: True)
    assert memory.prime_allocator() is False
    assert sizes == [] and memory._primed


def test_a_refused_block_is_ignored(monkeypatch):
    def refuse(n, *args, **kwargs):
        raise MemoryError("no address space")

    _spy(monkeypatch)
    monkeypatch.setattr(memory, "np", types.SimpleNamespace(empty=refuse))
    assert memory.prime_allocator() is False
    assert memory._primed and memory.prime_allocator() is False
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.0, 0.01, 100)]
    assert 0.0 < acc.get_epsilon(1e-5) < 10.0


def _glibc_mallinfo2():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):        # (not glibc, or glibc before 2.33)
        return None


_MAPPED = """
import ctypes, sys
import numpy as np
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = Info
import pb_accountant._memory as memory
if sys.argv[1] == "prime":
    assert memory.prime_allocator()
before = mallinfo2().hblkhd
block = np.empty(20 * 2 ** 20 // 8)
print(mallinfo2().hblkhd - before)
"""


@pytest.mark.skipif(_glibc_mallinfo2() is None, reason="glibc's mallinfo2 (Linux, glibc 2.33+)")
@pytest.mark.skipif(any(k.startswith("MALLOC_") for k in os.environ),
                    reason="malloc tuned by the environment (no dynamic threshold)")
def test_after_the_priming_a_20_mib_array_comes_from_the_heap():
    # unprimed, glibc maps the block (its threshold starts at 128 KiB); primed, the
    # threshold is 30 MiB and the heap serves it
    assert int(_python(_MAPPED, "skip")) >= 20 * 2 ** 20
    assert int(_python(_MAPPED, "prime")) == 0


_BITS = """
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
    skipped, primed = (_python(_BITS, mode).split() for mode in ("skip", "prime"))
    assert skipped[:2] == primed[:2]
    assert skipped[2] == primed[2] == "True"


def test_transforms_fall_back_to_one_thread_with_the_same_bits(monkeypatch):
    rng = np.random.default_rng(3)
    rows = rng.random((8, 40000)) * np.exp(rng.normal(0.0, 10.0, (8, 40000)))
    n = 80000
    assert convolution._workers(rows, n) > 1 or convolution._WORKERS == 1
    expected = convolution._rfft(rows, n)
    back = convolution._irfft(expected, n)
    real = convolution._fft
    calls = []

    def refusing(name):
        def transform(a, n=None, axis=-1, workers=1):
            calls.append(workers)
            if workers > 1:
                raise RuntimeError("Resource temporarily unavailable")
            return getattr(real, name)(a, n=n, axis=axis, workers=workers)
        return transform

    monkeypatch.setattr(convolution, "_fft", types.SimpleNamespace(
        rfft=refusing("rfft"), irfft=refusing("irfft")))
    assert convolution._rfft(rows, n).tobytes() == expected.tobytes()
    assert convolution._irfft(expected, n).tobytes() == back.tobytes()
    assert calls[-1] == 1
    # a RuntimeError on one thread is not swallowed
    monkeypatch.setattr(convolution, "_workers", lambda a, n: 1)
    monkeypatch.setattr(convolution, "_fft", types.SimpleNamespace(
        rfft=lambda *a, **k: (_ for _ in ()).throw(RuntimeError("bug"))))
    with pytest.raises(RuntimeError, match="bug"):
        convolution._rfft(rows, n)


_LIMITED = """
import resource, sys
limit = int(sys.argv[1]) * 2 ** 20
resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
try:
    from pb_accountant import PrivacyBucketsAccountant
    import pb_accountant._memory as memory
except MemoryError:
    print("import-refused")
    raise SystemExit(0)
for _ in range(2):
    acc = PrivacyBucketsAccountant()
    acc.history = [(1.0, 1e-5, 10 ** 7)]
    b = acc.get_epsilon_bounds(1e-5)
print(b.lower, b.upper, memory._primed, "; ".join(b.notes).replace(" ", "_") or "-")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS as on Linux")
def test_an_address_space_limit_gives_bounds_or_the_engine_limit_never_a_crash():
    # on 12ae611 limits of 305-315 MiB raised pocketfft's "Resource temporarily
    # unavailable" (a worker thread's stack refused) out of get_epsilon_bounds
    exact = None
    for mib in (280, 295, 305, 315, 330, 345, 360, 400):
        out = _python(_LIMITED, str(mib)).split()
        if out == ["import-refused"]:
            continue
        low, up, primed, notes = float(out[0]), float(out[1]), out[2], out[3]
        assert primed == "True"               # (checked, not primed: the limit is finite)
        if up == float("inf"):
            assert low == 0.0 and "engine_limit" in notes, out
        else:
            exact = exact or (low, up)
            assert (low, up) == exact and 0.13 < low < up < 0.1306, out
