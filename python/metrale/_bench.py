# SPDX-License-Identifier: MIT OR Apache-2.0
"""metrale.bench: `metrale bench GLOB`'s verify-and-time report (tools/bench/report.hpp) as objects."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional, Sequence

from . import _metrale


@dataclass(frozen=True)
class BenchShape:
    label: str  # "ffn.gate_up", "custom"
    m: int
    n: int
    k: int


@dataclass(frozen=True)
class BenchRow:
    """One variant on one shape. Timing and error fields are None when it did not run."""
    backend: str
    target: str
    module: str
    kernel: str
    tier: str
    shape: BenchShape
    disposition: str  # "passed", "incorrect", "not-supported", "not-run"
    why: str
    rerun: str        # the `metrale bench` command that reruns this row alone
    weight_bytes: float
    flops: float
    seconds: tuple[float, ...]
    median_s: Optional[float]
    min_s: Optional[float]
    max_s: Optional[float]
    gb_per_s: Optional[float]
    gflop_per_s: Optional[float]
    ratio_to_baseline: Optional[float]
    max_abs: Optional[float]
    max_rel: Optional[float]
    worst_budget_ratio: Optional[float]
    checked: Optional[int]
    violations: Optional[int]
    summary: Optional[str]

    @property
    def name(self) -> str:
        return f"{self.module}/{self.kernel}"


@dataclass(frozen=True)
class BenchReport:
    glob: str
    shapes_from: str
    baseline: Optional[str]
    verify_columns: str
    budget: str
    rows: tuple[BenchRow, ...]
    counts: dict  # disposition -> rows: passed, incorrect, not_supported, not_run
    unmatched: str  # backends with no matching variant, one line each ("" when none)

    @property
    def ok(self) -> bool:
        """What `metrale bench`'s exit code 0 says: no variant incorrect or failed to launch."""
        return self.counts["incorrect"] == 0 and self.counts["not_run"] == 0


def _row(j: dict) -> BenchRow:
    timing = j["timing"] or {}
    error = j["error"] or {}
    return BenchRow(
        backend=j["backend"], target=j["target"], module=j["module"], kernel=j["kernel"], tier=j["tier"],
        shape=BenchShape(**j["shape"]), disposition=j["disposition"], why=j["why"], rerun=j["rerun"],
        weight_bytes=j["weight_bytes"], flops=j["flops"], seconds=tuple(timing.get("seconds", ())),
        median_s=timing.get("median_s"), min_s=timing.get("min_s"), max_s=timing.get("max_s"),
        gb_per_s=j.get("gb_per_s"), gflop_per_s=j.get("gflop_per_s"), ratio_to_baseline=j["ratio_to_baseline"],
        max_abs=error.get("max_abs"), max_rel=error.get("max_rel"), worst_budget_ratio=error.get("worst_budget_ratio"),
        checked=error.get("checked"), violations=error.get("violations"), summary=error.get("summary"))


def bench(glob: str, *, runtime: Optional[_metrale.Runtime] = None, backends: Sequence[str] = (),
          model: Optional[str] = None, m: Sequence[int] = (), n: int = 0, k: int = 0, baseline: Optional[str] = None,
          warmup: int = 1, repeat: int = 5, verify_columns: int = 256, seed: int = 1) -> BenchReport:
    """Verifies and times every GEMV/GEMM variant matching `glob` ('w4a16_gemm_t*'), as `metrale bench`
    does with the same options: on `model`'s FFN projection shapes (default qwen3-32b) or n and k, for
    each m (default 1, 8, 64), on each backend named (default: the selected one). Raises metrale.Error
    when nothing matches, metrale.Refusal for a backend named that did not load."""
    runtime = runtime if runtime is not None else _metrale.Runtime()
    document = json.loads(_metrale.bench_json(runtime, glob, list(backends), model or "", list(m), n, k, baseline or "",
                                              warmup, repeat, verify_columns, seed))
    return BenchReport(glob=document["glob"], shapes_from=document["shapes_from"], baseline=document["baseline"],
                       verify_columns=document["verify"]["columns"], budget=document["verify"]["budget"],
                       rows=tuple(_row(r) for r in document["rows"]), counts=document["summary"],
                       unmatched=document["unmatched"])
