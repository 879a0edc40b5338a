"""``pb-accountant``: certified privacy bounds of DP-SGD from the command line.

    pb-accountant epsilon --sigma 1.1 --sample-rate 0.01 --epochs 10 --delta 1e-5
    pb-accountant epsilon --sigma 1.1 --batch-size 256 --dataset-size 60000 --epochs 2.5 --delta 1e-5
    pb-accountant epsilon --schedule phases.csv --delta 1e-5
    pb-accountant delta   --sigma 1.1 --sample-rate 0.01 --steps 1000 --epsilon 1 2
    pb-accountant noise   --target-epsilon 3 --sample-rate 256/60000 --epochs 10 --delta 1e-5
    pb-accountant curve   --sigma 1.1 --sample-rate 0.01 --steps 1000 --png curve.png
    pb-accountant compare --sigma 1.1 --sample-rate 0.01 --steps 1000 --delta 1e-5
    pb-accountant risk    --sigma 1.1 --sample-rate 0.01 --steps 1000 --png risk.png
    pb-accountant report  state.json --out privacy

This module parses arguments and maps failures to exit statuses; ``_cli_commands``
computes, ``_cli_render`` formats.  Exit status 0: done; 2: a user error (bad value,
unwritable output path), one line on stderr naming the option; 1: an internal error,
one line (the traceback only with ``--debug``).  Python warnings never reach the user
as such: each distinct one becomes a single ``warning:`` line on stderr.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from typing import List, Optional, Sequence

from . import _cli_commands as commands
from . import _cli_render as render
from ._cli_commands import UserError

PROG = "pb-accountant"
EXIT_OK, EXIT_INTERNAL, EXIT_USAGE = 0, 1, 2

__all__ = ["main", "build_parser", "UserError", "PROG"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage block
        raise UserError(f"{self.prog}: error: {message}")


# --------------------------------------------------------------------------------------
# subcommands: compute (commands), then render
# --------------------------------------------------------------------------------------

def _emit(args, data, text_renderer, out) -> None:
    out.write(render.render_json(data) if args.json else text_renderer(data))


def cmd_epsilon(args, out) -> int:
    _emit(args, commands.epsilon(args), render.render_epsilon, out)
    return EXIT_OK


def cmd_delta(args, out) -> int:
    _emit(args, commands.delta(args), render.render_delta, out)
    return EXIT_OK


def cmd_noise(args, out) -> int:
    data = commands.noise(args)
    if data["certified"] or args.json:
        _emit(args, data, render.render_noise, out)
    if not data["certified"]:
        sys.stderr.write(f"{PROG} noise: error: cannot be certified: {data['reason']}\n")
        return EXIT_USAGE
    return EXIT_OK


def cmd_compare(args, out) -> int:
    _emit(args, commands.compare(args), render.render_compare, out)
    return EXIT_OK


def _commit(files) -> None:
    """Move staged output files into place (nothing is left half-written on failure)."""
    try:
        files.commit()
    except OSError as exc:
        files.discard()
        raise UserError(f"cannot write the output files: {exc.strerror or exc}") from None


def cmd_curve(args, out) -> int:
    data, files = commands.curve(args)
    _commit(files)
    if args.json:
        out.write(render.render_json(data))
    else:
        points = [(p["epsilon"], p["delta_lower"], p["delta_upper"])
                  for p in data.get("curve", [])]
        out.write(render.render_curve(data, points))
    return EXIT_OK


def cmd_risk(args, out) -> int:
    data, files = commands.risk(args)
    _commit(files)
    _emit(args, data, render.render_risk, out)
    return EXIT_OK


def cmd_report(args, out) -> int:
    data = commands.report(args)
    if args.json:
        out.write(render.render_json({k: v for k, v in data.items() if k != "markdown"}))
    else:
        out.write(render.render_report(data))
    return EXIT_OK


def _add_risk_and_report(sub) -> None:
    """The attack-risk and privacy-report subcommands (docs/attack-risk.md)."""
    p = sub.add_parser("risk", help="certified attack risk: an attacker's best TPR at given "
                                    "FPRs, and the GDP mu bracket")
    _add_schedule(p)
    p.add_argument("--fpr", nargs="+", metavar="ALPHA",
                   help="false-positive rates in [1e-300, 1] (default 1e-3 1e-2 0.1)")
    p.add_argument("--png", help="write the privacy curve and the trade-off band to this PNG")
    _add_output(p, progress=True)
    p.set_defaults(func=cmd_risk)

    p = sub.add_parser("report", help="privacy report (Markdown, JSON, PNG) of a saved "
                                      "accountant state or a tracker log")
    p.add_argument("source", help="JSON file: an accountant state_dict, a BudgetTracker "
                                  "state_dict, or a JSON-lines tracker log")
    p.add_argument("--out", metavar="PREFIX",
                   help="write PREFIX.md, PREFIX.json and PREFIX.png (default: Markdown on "
                        "stdout)")
    p.add_argument("--delta", nargs="+", metavar="DELTA",
                   help="deltas of the epsilon table (default 1e-5 1e-6 1e-8)")
    p.add_argument("--fpr", nargs="+", metavar="ALPHA",
                   help="false-positive rates of the attack-risk table (default 1e-3 1e-2 0.1)")
    p.add_argument("--no-plot", action="store_true", help="do not write the PNG")
    p.add_argument("--title")
    _add_output(p, progress=True)
    p.set_defaults(func=cmd_report)


# --------------------------------------------------------------------------------------
# parser
# --------------------------------------------------------------------------------------

def _add_rate(grp) -> None:
    grp.add_argument("--sample-rate", "-q", dest="sample_rate", metavar="Q",
                     help="Poisson sample rate: a number or a fraction such as 256/50000")
    grp.add_argument("--batch-size", dest="batch_size", metavar="B",
                     help="expected batch size; with --dataset-size, sample rate = B/N")
    grp.add_argument("--dataset-size", dest="dataset_size", metavar="N",
                     help="number of training examples (with --batch-size)")
    grp.add_argument("--steps", metavar="T", help="number of DP-SGD steps")
    grp.add_argument("--epochs", metavar="E",
                     help="number of epochs, fractions allowed: steps = ceil(E / sample rate) "
                          "(--sampler shuffle: ceil(E x ceil(N/B)), the batches of E passes)")


def _add_schedule(p) -> None:
    grp = p.add_argument_group("schedule (one phase, --segment per phase, or --schedule FILE)")
    grp.add_argument("--sigma", "--noise-multiplier", dest="sigma", metavar="SIGMA",
                     help="noise multiplier")
    _add_rate(grp)
    grp.add_argument("--segment", action="append", metavar="SIGMA,Q,STEPS",
                     help="one phase of a changing schedule (repeat in order)")
    grp.add_argument("--schedule", metavar="FILE",
                     help="CSV (header noise_multiplier,sample_rate,steps) or JSON list of "
                          "such objects, one per phase")


def _add_sampler(p) -> None:
    grp = p.add_argument_group("sampler (docs/which-epsilon.md)")
    grp.add_argument("--sampler", choices=commands.SAMPLER_CHOICES, default="poisson",
                     help="how batches are formed: poisson (default, Opacus's DPDataLoader), "
                          "fixed_size (b of n without replacement each step) or shuffle (one "
                          "permutation per epoch); the last two need --batch-size and "
                          "--dataset-size")
    grp.add_argument("--neighbouring", choices=commands.NEIGHBOURING_CHOICES, default=None,
                     help="neighbouring relation (default add_remove; replace_special for "
                          "shuffle, where add_remove is not defined)")


def _add_output(p, progress: bool = False, timing: bool = False) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")
    if progress:
        p.add_argument("--progress", action="store_true",
                       help="show progress on stderr even under --json or when stderr is "
                            "not a terminal")
        p.add_argument("--progress-delay", type=float, default=1.0, help=argparse.SUPPRESS)
    if timing:
        p.add_argument("--timing", action="store_true", help="report seconds taken")
    p.add_argument("--debug", action="store_true",
                   help="show the full traceback of an internal error")


def _add_peer_limits(p) -> None:
    p.add_argument("--peers", help="comma-separated subset of: opacus-rdp, opacus-prv, "
                                   "pld-pessimistic, pld-optimistic")
    p.add_argument("--peer-timeout", default="60", metavar="SECONDS",
                   help="time limit of each peer (default 60 s); a peer over it is "
                        "reported as failed")
    p.add_argument("--peer-memory", default="4", metavar="GIB",
                   help="memory limit of each peer in GiB (default 4)")
    p.add_argument("--pld-interval", default="1e-4",
                   help="dp_accounting value discretization interval (default 1e-4)")


def build_parser() -> argparse.ArgumentParser:
    from pb_accountant import __version__
    parser = _Parser(prog=PROG, description="Certified upper AND lower privacy bounds for "
                     "DP-SGD (Poisson-subsampled Gaussian) with privacy buckets.",
                     epilog="exit status: 0 done, 2 user error, 1 internal error")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("epsilon", help="certified epsilon bounds at a delta")
    _add_schedule(p)
    p.add_argument("--delta", required=True)
    _add_sampler(p)
    _add_output(p, progress=True)
    p.set_defaults(func=cmd_epsilon)

    p = sub.add_parser("delta", help="certified delta bounds at one or more epsilons")
    _add_schedule(p)
    p.add_argument("--epsilon", required=True, nargs="+", metavar="EPS")
    p.add_argument("--min-delta", default="1e-8",
                   help="smallest delta to resolve; sizes the grid (default 1e-8; smaller is "
                        "slower)")
    _add_sampler(p)
    _add_output(p, progress=True)
    p.set_defaults(func=cmd_delta)

    p = sub.add_parser("noise", help="smallest noise multiplier meeting a target epsilon")
    p.add_argument("--target-epsilon", required=True, metavar="EPS",
                   help="the epsilon the noise must certify")
    grp = p.add_argument_group("training")
    _add_rate(grp)
    p.add_argument("--delta", required=True,
                   help=f"the delta of the target, in [{commands.MIN_DELTA_FLOOR:g}, 1)")
    p.add_argument("--tol", default="1e-3",
                   help=f"relative tolerance on sigma, in [{commands.MIN_TOL:g}, "
                        f"{commands.MAX_TOL:g}] (default 1e-3)")
    p.add_argument("--max-evaluations", default="80",
                   help="most accountant evaluations of the search (default 80)")
    _add_sampler(p)
    _add_output(p, progress=True, timing=True)
    p.set_defaults(func=cmd_noise, sigma=None, segment=None, schedule=None)

    p = sub.add_parser("curve", help="epsilon-delta curve with both bounds (table, CSV, PNG)")
    _add_schedule(p)
    p.add_argument("--png", help="write the plot to this PNG file")
    p.add_argument("--csv", help="write the points to this CSV file")
    p.add_argument("--out", metavar="PREFIX", help="shorthand for --png PREFIX.png "
                                                   "--csv PREFIX.csv")
    p.add_argument("--min-delta", default="1e-8",
                   help="smallest delta to resolve; sizes the grid and the default range "
                        "(default 1e-8; smaller is slower)")
    p.add_argument("--eps-max", help="largest epsilon (default: the certified epsilon at "
                                     "--min-delta)")
    p.add_argument("--num", default="200",
                   help=f"number of epsilons, 2 to {commands.MAX_NUM} (default 200)")
    p.add_argument("--title")
    p.add_argument("--compare", action="store_true",
                   help="overlay Opacus RDP/PRV and dp_accounting PLD when installed")
    _add_peer_limits(p)
    p.add_argument("--compare-points", default="16", help=argparse.SUPPRESS)
    _add_sampler(p)
    _add_output(p, progress=True)
    p.set_defaults(func=cmd_curve)

    p = sub.add_parser("compare", help="pb bounds next to the installed peer accountants")
    _add_schedule(p)
    p.add_argument("--delta", required=True)
    _add_peer_limits(p)
    _add_sampler(p)
    _add_output(p, progress=True, timing=True)
    p.set_defaults(func=cmd_compare)
    _add_risk_and_report(sub)
    return parser


# --------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------

def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _stderr_is_tty() -> bool:
    try:
        return bool(sys.stderr.isatty())
    except (AttributeError, ValueError):
        return False


def _warning_lines(caught, where: str, notes: Sequence[str] = ()) -> List[str]:
    """One plain line per distinct warning the user can act on (numpy's floating-point
    chatter and the accountant's 'reporting inf', which the notes already explain,
    are dropped)."""
    lines: List[str] = []
    for w in caught:
        message = _one_line(w.message)
        if "encountered in" in message or "could not certify epsilon" in message:
            continue
        line = f"{where}: warning: {commands.user_terms(message)}"
        if line not in lines:
            lines.append(line)
    return lines


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``pb-accountant`` and ``python -m pb_accountant.integrations.cli``."""
    out = sys.stdout
    where = PROG
    debug = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=RuntimeWarning, message=".*encountered in")
        try:
            parser = build_parser()
            args = parser.parse_args(argv)
            where = f"{PROG} {args.command}"
            debug = bool(getattr(args, "debug", False))
            if hasattr(args, "progress"):
                args.show_progress = bool(args.progress) or (not args.json and _stderr_is_tty())
            if not hasattr(args, "timing"):
                args.timing = False
            status = int(args.func(args, out) or 0)
        except UserError as exc:
            message = _one_line(exc)
            if not message.startswith(PROG):
                message = f"{where}: error: {message}"
            status = EXIT_USAGE
            caught_lines = _warning_lines(caught, where)
            for line in caught_lines:
                sys.stderr.write(line + "\n")
            sys.stderr.write(message + "\n")
            return status
        except KeyboardInterrupt:
            sys.stderr.write(f"{PROG}: interrupted\n")
            return 130
        except BrokenPipeError:
            try:
                sys.stdout.close()
            except Exception:
                pass
            return EXIT_INTERNAL
        except Exception as exc:              # a bug of ours or of the engine: not the user's
            if debug:
                import traceback
                traceback.print_exc()
            detail = _one_line(f"{type(exc).__name__}: {exc}")
            if len(detail) > 200:
                detail = detail[:197] + "..."
            sys.stderr.write(f"{where}: internal error: {detail}"
                             f"{'' if debug else ' (run with --debug for the traceback)'}\n")
            return EXIT_INTERNAL
        for line in _warning_lines(caught, where):
            sys.stderr.write(line + "\n")
        return status


if __name__ == "__main__":
    sys.exit(main())
