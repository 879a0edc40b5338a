"""Data-parallel DP-SGD with two CPU processes (gloo) and ``PrivacyEngine(accountant="pb")``.

Each rank wraps the model in Opacus's ``DifferentiallyPrivateDistributedDataParallel``,
trains a few Poisson-sampled steps and writes its history and bounds to a JSON file.
All ranks must report the same history and bit-identical bounds, equal to a fresh
accountant given that history.
"""
import json
import os
import socket
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("opacus")
import torch.distributed as dist  # noqa: E402

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()),
    reason="torch.distributed with the gloo backend is not available")

WORLD_SIZE = 2
STEPS = 5
SIGMA = 1.0
BATCH_SIZE = 32
N, D, C = 256, 8, 3
DELTA = 1e-5


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, out_dir: str) -> None:
    """Runs in a spawned process: one rank of the data-parallel job."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        from torch import nn
        from torch.utils.data import DataLoader, TensorDataset

        import pb_accountant  # noqa: F401  (registers "pb")
        from opacus import PrivacyEngine
        from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP

        g = torch.Generator().manual_seed(1)
        x = torch.randn(N, D, generator=g)
        y = (x @ torch.randn(D, C, generator=g)).argmax(dim=1)
        dataset = TensorDataset(x, y)

        torch.manual_seed(rank)        # different initial weights: DPDDP must sync them
        model = DPDDP(nn.Sequential(nn.Linear(D, 16), nn.ReLU(), nn.Linear(16, C)))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        engine = PrivacyEngine(accountant="pb")
        model, optimizer, loader = engine.make_private(
            module=model, optimizer=optimizer,
            data_loader=DataLoader(dataset, batch_size=BATCH_SIZE),
            noise_multiplier=SIGMA, max_grad_norm=1.0, poisson_sampling=True)
        criterion = nn.CrossEntropyLoss()
        steps = 0
        for xb, yb in loader:
            optimizer.zero_grad()
            criterion(model(xb), yb).backward()
            optimizer.step()
            steps += 1
            if steps == STEPS:
                break
        acc = engine.accountant
        bounds = acc.get_epsilon_bounds(DELTA)
        checksum = float(sum(p.detach().double().sum() for p in model.parameters()))
        report = {
            "rank": rank,
            "world_size": dist.get_world_size(),
            "steps": steps,
            "sample_rate": 1 / len(loader),
            "loader": type(loader).__name__,
            "accountant": type(acc).__name__,
            "history": [list(h) for h in acc.history],
            "len": len(acc),
            "lower": bounds.lower,
            "upper": bounds.upper,
            "get_epsilon": engine.get_epsilon(DELTA),
            "checksum": checksum,
        }
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(report, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


# failures of the rendezvous itself (a port taken between choosing and binding it,
# a peer refused under heavy load): retried on a fresh port, anything else fails at once
TRANSIENT = ("Address already in use", "EADDRINUSE", "Connection refused",
             "Connection reset", "Socket Timeout", "timed out")


def _spawn_ranks(tmp_path, attempts=3):
    import torch.multiprocessing as mp

    errors = []
    for attempt in range(attempts):
        out = tmp_path / f"attempt{attempt}"
        out.mkdir()
        try:
            mp.spawn(_worker, args=(WORLD_SIZE, _free_port(), str(out)), nprocs=WORLD_SIZE,
                     join=True)
            return out
        except Exception as exc:   # ProcessRaisedException / ProcessExitedException
            text = f"{type(exc).__name__}: {exc}"
            if not any(marker in text for marker in TRANSIENT):
                raise
            errors.append(text)
    pytest.fail(f"gloo rendezvous failed {attempts} times:\n" + "\n".join(errors))


def test_two_process_dpddp_ranks_report_identical_bounds(tmp_path):
    out = _spawn_ranks(tmp_path)
    reports = []
    for rank in range(WORLD_SIZE):
        with open(out / f"rank{rank}.json") as f:
            reports.append(json.load(f))

    r0 = reports[0]
    assert r0["world_size"] == WORLD_SIZE
    assert r0["accountant"] == "PrivacyBucketsAccountant"
    assert r0["loader"] == "DPDataLoader"
    assert r0["steps"] == STEPS
    q = r0["sample_rate"]
    assert q == pytest.approx(BATCH_SIZE / N)
    assert r0["history"] == [[SIGMA, q, STEPS]]
    assert r0["len"] == STEPS
    assert 0.0 < r0["lower"] <= r0["upper"] < float("inf")
    assert r0["get_epsilon"] == r0["upper"]
    for r in reports[1:]:
        assert r["history"] == r0["history"], reports
        assert (r["lower"], r["upper"]) == (r0["lower"], r0["upper"]), reports
        assert r["get_epsilon"] == r0["get_epsilon"], reports
        # DPDDP kept the replicas in sync (same noised update everywhere)
        assert r["checksum"] == pytest.approx(r0["checksum"], rel=1e-6, abs=1e-9), reports

    from pb_accountant import PrivacyBucketsAccountant

    acc = PrivacyBucketsAccountant()
    acc.history = [tuple(h) for h in r0["history"]]
    b = acc.get_epsilon_bounds(DELTA)
    assert (b.lower, b.upper) == (r0["lower"], r0["upper"]), (b, reports)
