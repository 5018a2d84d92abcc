# SPDX-License-Identifier: MIT OR Apache-2.0
"""metrale.bench: `metrale bench`'s verify-and-time report, as objects."""
import json

import pytest

import metrale
from conftest import run_cli

SMALL = dict(n=256, k=256, m=[1, 8], warmup=0, repeat=2)


def test_one_row_per_variant_and_shape_with_its_disposition(runtime, cli):
    report = metrale.bench("w4a16_gemm_t*", runtime=runtime, backends=["cpu"], **SMALL)
    stdout, _ = run_cli(cli, "bench", "w4a16_gemm_t*", "--backend", "cpu", "--n", "256", "--k", "256", "--m", "1,8",
                        "--warmup", "0", "--repeat", "2", "--json", "--quiet")
    expected = json.loads(stdout)
    assert [(r.name, r.shape.m, r.disposition) for r in report.rows] == \
        [(f"{r['module']}/{r['kernel']}", r["shape"]["m"], r["disposition"]) for r in expected["rows"]]
    variants = {r.name for r in report.rows}
    assert "w4a16/w4a16_gemm_t" in variants and len(variants) >= 2
    assert len(report.rows) == 2 * len(variants)
    assert report.counts == expected["summary"]
    assert report.ok
    for row in report.rows:
        assert row.disposition == "passed"
        assert row.median_s > 0 and len(row.seconds) == 2 and row.min_s <= row.median_s <= row.max_s
        assert row.violations == 0 and row.checked > 0
        assert row.rerun.startswith("metrale bench 'w4a16/w4a16_gemm_t")
    assert report.shapes_from == "--n 256 --k 256"


def test_one_shape_gives_one_row_per_variant(runtime, cpu):
    report = metrale.bench("w4a16/w4a16_gemm_t*", runtime=runtime, n=256, k=256, m=[8], warmup=0, repeat=1)
    listed = sorted(k["name"] for k in cpu.kernels()
                    if k["module"] == "w4a16" and k["name"].startswith("w4a16_gemm_t") and k["provided"])
    assert sorted(r.kernel for r in report.rows) == listed
    assert all(r.disposition in ("passed", "incorrect", "not-supported", "not-run") for r in report.rows)


def test_baseline_ratios(runtime):
    report = metrale.bench("w4a16_gemm_t*", runtime=runtime, baseline="w4a16_gemm_t", **SMALL)
    base = [r for r in report.rows if r.kernel == "w4a16_gemm_t"]
    assert base and all(r.ratio_to_baseline == pytest.approx(1.0) for r in base)
    assert all(r.ratio_to_baseline is not None for r in report.rows)


def test_nothing_matched_is_an_error(runtime):
    with pytest.raises(metrale.Error, match="nothing to bench") as failed:
        metrale.bench("no_such_variant*", runtime=runtime, **SMALL)
    assert not isinstance(failed.value, metrale.Refusal)
