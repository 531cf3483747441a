"""`codeplay bench` finds `benchmarks/` beside the package (the console script's sys.path lacks the clone), and
says in one line that it needs a clone where there is none."""

from __future__ import annotations

import sys
from pathlib import Path

import benchmarks
from codeplay_lightning.cli import main
from codeplay_lightning.commands import bench


def test_the_benchmarks_are_found_beside_the_package_when_the_clone_is_not_on_the_path(monkeypatch):
    monkeypatch.setattr(sys, "path", [path for path in sys.path if Path(path or ".").resolve() != bench.CHECKOUT])
    monkeypatch.delitem(sys.modules, "benchmarks")
    assert Path(bench.clone_benchmarks().__file__) == bench.CHECKOUT / "benchmarks" / "__init__.py"


def test_bench_passes_its_options_to_the_benchmarks(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(benchmarks, "run_benchmarks", lambda out, **options: calls.append((out, options)))
    assert main(["bench", "--out", str(tmp_path / "bench.json"), "--pairs", "5", "--skip-model"]) == 0
    assert calls == [(tmp_path / "bench.json", {"pairs": 5, "with_model": False})]


def test_bench_without_a_clone_is_a_one_line_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(bench, "CHECKOUT", tmp_path)
    assert main(["bench"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: codeplay bench runs from a clone") and "\n" not in error
