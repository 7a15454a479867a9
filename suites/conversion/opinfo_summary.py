"""How trtcheck's converters fare on torch's OpInfo samples: the counts issue 11's "Done means" asks for.

    python -m suites.conversion.opinfo_summary [--dtype float32] [--all-samples] [--samples N]
        [--ops GLOB,...] [--failures] [--alone]

For each dtype (float32, float16, int64, bool, or the one given), ops and samples that were claimed by a
converter and equal to eager, refused (no converter, or its validator said no), skipped (torch.export
could not capture the sample, eager failed, random output, nothing to convert; ops that do not support the
dtype count as skipped ops with no samples), and failing (a fallback at conversion or engine build, a
raising validator, an output unlike eager's, an exception out of ``trtcheck.compile``). An op counts once,
as its worst sample: failing, else equal, else refused, else skipped. The per-sample logic is
``opinfo_cases.py``'s, which ``test_opinfo.py`` also uses; by default the ci profile's number of samples
per op and dtype is run, ``--all-samples`` runs them all (the nightly profile).
"""

from __future__ import annotations

import argparse
import fnmatch
import logging
import sys
import time
from collections import Counter

import torch

from suites.conversion import opinfo_cases as cases
from suites.conversion.opinfo_expected_failures import EXPECTED_FAILURES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtype", choices=list(cases.DTYPES), action="append", help="only this dtype (repeatable)")
    parser.add_argument("--all-samples", action="store_true", help="every sample (the nightly profile)")
    parser.add_argument("--samples", type=int, default=None, help="samples per op and dtype (default: the ci profile's)")
    parser.add_argument("--ops", default="*", help="op ids or globs, comma separated (default: all)")
    parser.add_argument("--failures", action="store_true", help="list every failing sample")
    parser.add_argument("--refused", action="store_true", help="list every refused op with its first reason")
    parser.add_argument("--skips", action="store_true", help="list skip reasons with their counts")
    parser.add_argument("--alone", action="store_true", help="compile every sample alone (slower; no batching)")
    args = parser.parse_args(argv)

    dtypes = args.dtype or list(cases.DTYPES)
    limit = None if args.all_samples else (args.samples or cases.samples_per_op(cases.DEFAULT_PROFILE))
    patterns = [p.strip() for p in args.ops.split(",") if p.strip()]
    ops = [op for op in cases.op_db() if any(fnmatch.fnmatchcase(cases.op_id(op), p) for p in patterns)]

    cases.quiet_threads()
    torch._logging.set_logs(all=logging.ERROR)  # no graph dumps from export failures on stderr
    start = time.perf_counter()
    results: dict[str, cases.OpResults] = {}
    chunk = 16
    for i in range(0, len(ops), chunk):
        results.update(cases.run_ops(ops[i:i + chunk], limit, dtypes, batched=not args.alone))
        print(f"\r{min(i + chunk, len(ops))}/{len(ops)} ops, {time.perf_counter() - start:.0f} s", end="", file=sys.stderr)
    print(file=sys.stderr)

    print(f"OpInfo ops: {len(ops)}; samples per op and dtype: {'all' if limit is None else limit}; "
          f"{time.perf_counter() - start:.0f} s")
    header = f"{'dtype':<8} {'':<8} {'equal':>7} {'refused':>8} {'skipped':>8} {'failing':>8} {'(expected)':>10} {'total':>7}"
    print(header)
    failing_lines: list[str] = []
    refused_lines: list[str] = []
    skip_reasons: Counter = Counter()
    for name in dtypes:
        tally = cases.Tally()
        expected_ops = expected_samples = 0
        for op in ops:
            per_dtype = results[cases.op_id(op)]
            if name not in per_dtype:
                tally.unsupported_ops += 1
                tally.ops[cases.SKIPPED] += 1
                continue
            op_results = per_dtype[name]
            outcome = tally.add_op(op_results)
            known = cases.expected_failure(EXPECTED_FAILURES, cases.op_id(op), name)
            failing = [r for r in op_results if r.outcome == cases.FAILING]
            if known and failing:
                expected_ops += 1
                expected_samples += len(failing)
            for r in failing:
                failing_lines.append(("(expected) " if known else "") + r.line().splitlines()[0][:400])
            if outcome == cases.REFUSED:
                first = next(r for r in op_results if r.outcome == cases.REFUSED)
                refused_lines.append(f"{first.op} {name}: {first.reason[:160]}")
            skip_reasons.update(f"{name} {r.reason[:90]}" for r in op_results if r.outcome == cases.SKIPPED)
        for what, counter, extra in (("ops", tally.ops, expected_ops), ("samples", tally.samples, expected_samples)):
            print(f"{name:<8} {what:<8} {counter[cases.EQUAL]:>7} {counter[cases.REFUSED]:>8} {counter[cases.SKIPPED]:>8} "
                  f"{counter[cases.FAILING]:>8} {extra:>10} {sum(counter.values()):>7}")
        reasons = ", ".join(f"{k} {v}" for k, v in tally.skip_reasons.most_common())
        print(f"{'':<8} skipped: unsupported dtype {tally.unsupported_ops} ops; samples: {reasons or 'none'}")
    if args.failures:
        print("\nfailing samples:")
        print("\n".join(failing_lines) or "none")
    if args.refused:
        print("\nrefused ops:")
        print("\n".join(refused_lines) or "none")
    if args.skips:
        print("\nskip reasons:")
        for reason, count in skip_reasons.most_common():
            print(f"{count:>5}  {reason}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
