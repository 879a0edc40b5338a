"""The training examples' shared flag checks: a bad flag is argparse's usage error (exit
2, naming the flag) before any training, not a traceback from inside the library."""
from __future__ import annotations

import argparse

from pb_accountant._validation import check_noise_multiplier


def check_training_flags(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--epochs, --sigma, --batch-size, --delta and --max-epsilon, as the examples that
    train with them take them."""
    if args.epochs < 1:
        p.error("--epochs must be >= 1")
    try:
        check_noise_multiplier(args.sigma, "--sigma", allow_zero=False)
    except ValueError as exc:
        p.error(str(exc))
    if args.batch_size < 1:
        p.error("--batch-size must be >= 1")
    if not 0 < args.delta < 1:
        p.error("--delta must be in (0, 1)")
    if not args.max_epsilon >= 0:
        p.error("--max-epsilon must be >= 0")
