"""`codeplay bench`'s sandbox benchmark on a few programs: the sandbox, the naive harness and the
in-process ceiling must reach identical verdicts (the model benchmarks need the real model)."""

from benchmarks import run_benchmarks
from benchmarks.sandbox import bench_sandbox, benchmark_programs


def test_the_sandbox_benchmark_agrees_with_the_naive_harness_and_in_process_judging():
    result = bench_sandbox(60)
    assert result["identical_verdicts"], result["mismatches"]
    assert result["programs"] == 60 and result["sandbox_verdicts_per_s"] > 0 and result["naive_verdicts_per_s"] > 0
    assert result["bare_forks_per_s"] > 0 and 0 < result["fraction_of_bare_forks"] < 1
    assert set(result["status_counts"]) >= {"pass", "fail", "error"}
    assert callable(run_benchmarks)


def test_the_benchmark_mix_holds_every_kind_of_verdict():
    programs = benchmark_programs(300)
    assert len(programs) == 300 and len({program.f for program in programs}) == 300  # an f of its own each
