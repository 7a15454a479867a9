"""trtcheck's converters proven on torch's OpInfo samples, as onnxscript proves torchlib.

One test per OpInfo op and dtype (float32, float16, int64, bool, where the op supports the dtype on CPU;
an eighth of the ops' float32 samples in the default tier, the rest in the sweep tier, ``pytest --sweeps``):
its samples become one-op models, compiled by ``trtcheck.compile`` (``min_block_size=1``, ONNX Runtime),
and each must be refused by the converters (no converter, or a validator said no) or be claimed and equal
to eager. A fallback at conversion or engine build, a raising validator, an output unlike eager's, or an
exception out of ``trtcheck.compile`` fails the test. Samples torch.export cannot capture, samples eager
fails on and samples with random output are skipped (``opinfo_summary.py`` counts them).

Refused and skipped samples prove nothing, so at least one sample of each op and dtype must be claimed and
equal to eager, unless ``opinfo_not_converted.py`` lists the op and dtype with the reason none is: else a
validator that refused everything would pass.

How many samples per op and dtype follows the hypothesis profile (root ``conftest.py``): ``ci`` (the
default) and ``dev`` the first one, ``nightly`` all of them. ``opinfo_cases.py`` holds the per-sample logic
and ``opinfo_expected_failures.py`` the reviewed table of known converter bugs.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("expecttest", reason="torch's OpInfo database imports expecttest: pip install -e '.[dev]'")

import torch

import trtcheck
from suites.conversion import opinfo_cases as cases
from suites.conversion.opinfo_expected_failures import EXPECTED_FAILURES
from suites.conversion.opinfo_not_converted import NOT_CONVERTED, suggested_entry

PAIRS = cases.op_dtype_pairs()
CHUNK = 64  # (op, dtype) pairs computed together: the samples of a chunk are compiled in batches


def _profile(config: pytest.Config) -> str:
    """The hypothesis profile this run uses: ``--hypothesis-profile``, else $HYPOTHESIS_PROFILE, else ci."""
    return (
        config.getoption("--hypothesis-profile", default=None)
        or os.environ.get(cases.PROFILE_VARIABLE)
        or cases.DEFAULT_PROFILE
    )


@pytest.fixture(scope="module")
def opinfo_results(request: pytest.FixtureRequest):
    """``results(op, dtype)``: the samples' results, computed a chunk of the selected tests at a time."""
    limit = cases.samples_per_op(_profile(request.config))
    selected = [
        tuple(item.callspec.params[k] for k in ("op", "dtype"))
        for item in request.session.items
        if item.module is request.module and hasattr(item, "callspec") and "op" in item.callspec.params
    ]
    position = {pair: i for i, pair in enumerate(selected)}
    cache: dict[tuple[str, str], list[cases.SampleResult]] = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)

    def results(op: str, dtype: str) -> list[cases.SampleResult]:
        if (op, dtype) not in cache:
            start = position.get((op, dtype), 0) // CHUNK * CHUNK
            chunk = [p for p in selected[start:start + CHUNK] if p not in cache] or [(op, dtype)]
            if (op, dtype) not in chunk:
                chunk.append((op, dtype))
            cache.update(cases.run_pairs(chunk, limit))
        return cache[(op, dtype)]

    yield results
    torch.set_num_threads(threads)


# The default tier (README command (2), before every commit) runs the float32 samples of every eighth op (a fixed
# eighth, 85 ops: the converters' own unit tests, suites/conversion/test_converter_ops.py, cover every converter in
# the default tier); the rest is the sweep tier (``pytest --sweeps``), of which CI runs the
# float32 samples of the nn.functional ops (``-m sweep -k "float32 and nn.functional"``) and a nightly the whole.
DEFAULT_TIER_DTYPE = "float32"
DEFAULT_TIER_EVERY = 8
_FLOAT32 = [pair for pair in PAIRS if pair[1] == DEFAULT_TIER_DTYPE]
DEFAULT_TIER = frozenset(_FLOAT32[::DEFAULT_TIER_EVERY])


@pytest.mark.parametrize(
    ("op", "dtype"),
    [pytest.param(op, dtype, marks=() if (op, dtype) in DEFAULT_TIER else pytest.mark.sweep) for op, dtype in PAIRS],
    ids=[f"{op}-{dtype}" for op, dtype in PAIRS],
)
def test_opinfo_sample_refused_or_equal(op: str, dtype: str, opinfo_results) -> None:
    judge(
        opinfo_results(op, dtype),
        cases.expected_failure(EXPECTED_FAILURES, op, dtype),
        cases.not_converted(NOT_CONVERTED, op, dtype),
    )


def judge(
    results: list[cases.SampleResult],
    expected: cases.ExpectedFailure | None,
    excused: cases.NotConverted | None = None,
) -> None:
    """Fail on any failing sample; xfail when the table's entry excuses every one of them; fail when the
    entry's sample ran and nothing failed (the bug is fixed: the entry must go). Then the floor: fail
    unless a sample converted and equals eager, or ``excused`` (the op's ``NOT_CONVERTED`` entry) says why
    none does."""
    failing = [r for r in results if r.outcome == cases.FAILING]
    if expected is None:
        assert not failing, f"{len(failing)} of {len(results)} samples fail:\n" + "\n".join(r.line() for r in failing)
    else:
        _judge_expected(results, failing, expected)
    _judge_floor(results, excused)


def _judge_expected(results: list[cases.SampleResult], failing: list[cases.SampleResult], expected: cases.ExpectedFailure) -> None:
    unexcused = [r for r in failing if not expected.excuses(r)]
    assert not unexcused, "failing beyond the expected failure:\n" + "\n".join(r.line() for r in unexcused)
    if failing:
        pytest.xfail(f"expected failure: {expected.why} ({len(failing)} of {len(results)} samples)")
    assert expected.sample not in {r.index for r in results}, (
        f"{expected.op} {expected.dtype} sample {expected.sample} no longer fails ({expected.why}): remove its "
        "entry from opinfo_expected_failures.py"
    )


def _judge_floor(results: list[cases.SampleResult], excused: cases.NotConverted | None) -> None:
    """At least one sample claimed and equal to eager, or a NOT_CONVERTED entry whose sample is refused or
    skipped (and does not convert: else the entry must go)."""
    converted = [r for r in results if r.outcome == cases.EQUAL]
    if excused is None:
        assert converted, (
            f"no sample of {len(results)} was claimed by a converter and equal to eager:\n"
            + "\n".join(r.line() for r in results)
            + "\nwhere that is by design, add to NOT_CONVERTED in opinfo_not_converted.py:\n"
            + "\n".join(suggested_entry(r) for r in results if r.outcome in (cases.REFUSED, cases.SKIPPED))
        )
        return
    listed = [r for r in results if r.index == excused.sample]
    for result in listed:
        assert result.outcome != cases.EQUAL, (
            f"{result.op} {result.dtype} sample {result.index} converts and equals eager now: remove its "
            "NOT_CONVERTED entry from opinfo_not_converted.py"
        )
    assert converted or any(excused.excuses(r) for r in listed), (
        f"sample {excused.sample}, the one the NOT_CONVERTED entry excuses, did not run:\n" + "\n".join(r.line() for r in results)
    )


def test_judge_holds_the_expected_failures_table_to_account() -> None:
    entry = cases.ExpectedFailure("sin", "float32", "a made-up bug", "Cos", sample=1)
    equal = cases.SampleResult("sin", "float32", 0, cases.EQUAL)
    bad = cases.SampleResult("sin", "float32", 1, cases.FAILING, "differs from eager: Cos")
    other = cases.SampleResult("sin", "float32", 2, cases.FAILING, "fell back: something else")
    judge([equal], entry)  # the entry's sample did not run (ci): nothing to say
    judge([equal], None)
    with pytest.raises(pytest.xfail.Exception):
        judge([equal, bad], entry)  # excused
    with pytest.raises(AssertionError, match="beyond the expected failure"):
        judge([equal, bad, other], entry)  # a failure the entry does not describe
    with pytest.raises(AssertionError, match="no longer fails"):
        judge([equal, cases.SampleResult("sin", "float32", 1, cases.EQUAL)], entry)  # fixed: remove the entry
    with pytest.raises(AssertionError, match="1 of 2 samples fail"):
        judge([equal, bad], None)


def test_judge_asks_every_op_for_a_converted_sample() -> None:
    """The floor: refused or skipped samples alone pass only when NOT_CONVERTED says why."""
    refused = cases.SampleResult("erfinv", "float32", 0, cases.REFUSED,
                                 "aten.erfinv.default: no_converter: no converter for aten.erfinv.default")
    random = cases.SampleResult("erfinv", "float32", 0, cases.SKIPPED, "random: eager disagrees with itself")
    equal = cases.SampleResult("erfinv", "float32", 0, cases.EQUAL)
    later = cases.SampleResult("erfinv", "float32", 1, cases.EQUAL)
    entry = cases.NotConverted("erfinv", ("float32",), "no converter for aten.erfinv.default")
    judge([equal], None)
    judge([refused], None, entry)
    judge([random], None, entry)  # not converted either: the entry holds (see NotConverted on why not the reason)
    judge([refused, later], None, entry)  # nightly: a later sample converts, the entry's still does not
    with pytest.raises(AssertionError, match="no sample of 1 was claimed") as error:
        judge([refused], None)  # a validator that refuses everything lands here
    assert 'NotConverted("erfinv", ("float32",), no_converter("aten.erfinv.default")),' in str(error.value)
    with pytest.raises(AssertionError, match="no sample of 1 was claimed") as error:
        judge([random], None)
    assert 'NotConverted("erfinv", ("float32",), RANDOM),' in str(error.value)
    with pytest.raises(AssertionError, match="remove its NOT_CONVERTED entry"):
        judge([equal], None, entry)  # converts now
    with pytest.raises(AssertionError, match="did not run"):
        judge([cases.SampleResult("erfinv", "float32", -1, cases.SKIPPED, "sample_inputs failed: boom")], None, entry)


def test_not_converted_entries_name_real_ops_and_dtypes_once() -> None:
    pairs = set(PAIRS)
    seen = set()
    for entry in NOT_CONVERTED:
        assert entry.dtypes and entry.why.strip(), entry
        for dtype in entry.dtypes:
            assert (entry.op, dtype) in pairs, f"{entry.op} {dtype}: no OpInfo op and dtype of this suite"
            assert (entry.op, dtype) not in seen, f"{entry.op} {dtype} is listed twice"
            seen.add((entry.op, dtype))
    # Most ops convert: the table lists exceptions, not the rule (written with 853 of 2,045 pairs listed).
    assert len(seen) < len(pairs) // 2


def test_expected_failures_name_real_ops_and_dtypes() -> None:
    """Every entry of the table names an OpInfo op and a dtype it supports, once."""
    seen = set()
    for entry in EXPECTED_FAILURES:
        assert (entry.op, entry.dtype) in set(PAIRS), f"{entry} names no OpInfo op and dtype of this suite"
        assert (entry.op, entry.dtype) not in seen, f"{entry.op} {entry.dtype} is listed twice"
        seen.add((entry.op, entry.dtype))
        assert entry.why.strip(), f"{entry.op} {entry.dtype}: say why it fails"


def test_profile_sample_counts() -> None:
    assert cases.samples_per_op("nightly") is None
    assert cases.samples_per_op("ci") == cases.samples_per_op(None) >= 1


# ---- the harness itself can fail ---------------------------------------------------------------------
# A converter made wrong on purpose (through the public registry, restored afterwards) must turn the
# outcome of ``sin`` from EQUAL into FAILING; a validator that refuses turns it into REFUSED.

aten = torch.ops.aten


def _sin_results() -> list[cases.SampleResult]:
    """sin's samples, float32 batched and alone, float16 alone (its tolerance has a second chance)."""
    return (
        cases.run_op("sin", "float32", 2, batched=True)
        + cases.run_op("sin", "float32", 1, batched=False)
        + cases.run_op("sin", "float16", 1, batched=False)
    )


def test_harness_sin_is_equal_with_the_builtin_converter() -> None:
    assert trtcheck.conversion.get(aten.sin.default) is not None
    assert {r.outcome for r in _sin_results()} == {cases.EQUAL}


def test_harness_fails_a_converter_that_computes_the_wrong_thing() -> None:
    with trtcheck.conversion.Snapshot():
        trtcheck.conversion.register(aten.sin.default, override=True)(
            lambda ctx, node: ctx.add("Cos", [ctx.name(node.args[0])])
        )
        results = _sin_results()
    assert {r.outcome for r in results} == {cases.FAILING}, [r.line() for r in results]
    assert all("differs from eager" in r.reason for r in results)


def test_harness_fails_a_converter_that_raises() -> None:
    def broken(ctx, node):
        raise RuntimeError("broken on purpose")

    with trtcheck.conversion.Snapshot():
        trtcheck.conversion.register(aten.sin.default, override=True)(broken)
        results = _sin_results()
    assert {r.outcome for r in results} == {cases.FAILING}, [r.line() for r in results]
    assert all("fell back" in r.reason and "broken on purpose" in r.reason for r in results)


@pytest.mark.slow
def test_harness_counts_a_refusing_validator_as_refused() -> None:
    builtin = trtcheck.conversion.get(aten.sin.default)
    with trtcheck.conversion.Snapshot():
        trtcheck.conversion.register(aten.sin.default, validator=lambda node: False, override=True)(builtin.fn)
        results = _sin_results()
    assert {r.outcome for r in results} == {cases.REFUSED}, [r.line() for r in results]


def test_harness_skips_random_ops() -> None:
    results = cases.run_op("bernoulli", "float32", 2)
    assert results and {r.outcome for r in results} == {cases.SKIPPED}
    assert all(r.reason.startswith("random") for r in results), [r.line() for r in results]


@pytest.mark.slow
def test_harness_keeps_a_sample_s_inputs_when_the_generator_writes_into_them_for_the_next() -> None:
    """OpInfo's masked ops reuse one input tensor across samples (inf, then -inf, then NaN written into it): a prepared
    sample's inputs must stay those eager ran on (they did not: 12 masked op cases failed the nightly profile)."""
    results = cases.run_op("masked.sum", "float32", 20)  # samples 16-19 failed
    assert len(results) == 20 and {r.outcome for r in results} <= {cases.EQUAL, cases.REFUSED}, \
        [r.line() for r in results if r.outcome not in (cases.EQUAL, cases.REFUSED)]


def test_harness_takes_a_finite_result_where_eager_overflowed_and_float64_did_not() -> None:
    results = cases.run_op("nn.functional.soft_margin_loss", "float16", 6)  # eager's float16 exp overflows
    assert {r.outcome for r in results} == {cases.EQUAL}, [r.line() for r in results]
