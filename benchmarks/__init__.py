"""`python -m benchmarks` (`make bench`): performance goals as ratios measured side by side in one run.

- Sandbox verdicts/s, every program with an f of its own, against the machine's bare fork speed
  (two loops of a minimal Python forking a child that exits at once, as the sandbox's two wardens
  run): goal ≥ 25%, half of the floor of two fresh processes per program. Against a naive harness
  (one `multiprocessing.Process` plus one `Manager` per program, four driver threads) on the same
  programs, whose verdicts must be identical, and against unsandboxed in-process `exec`.
- Judging an iteration's programs (184, the mix above) with 1 worker, 2 and `sandbox.workers: auto`'s number:
  seconds and the speed-up over one worker.
- Judging with the Ray backend (`sandbox.backend: ray`, 2 actors on a Ray instance of this machine's) against the
  local backend (2 wardens) on the same programs: verdicts/s and their ratio, the overhead of judging through Ray.
- Novelty archive: hnswlib 5-NN at a 100k archive against exact numpy search. Goal: ≥ 20×
  faster at recall@5 ≥ 0.95.
- Judged puzzles per hour of one CPU-scale training iteration (configs/balanced.yaml, embedded
  model, full fine-tune) against the code before the loop was made faster (commit `BASELINE` in
  benchmarks/loop.py, same config and seed, one after the other in this run): goal ≥ 2.5×. Against the
  limit, the bare model's forward + backward on the iteration's action tokens × PPO epochs plus its
  Setter and Solver sampling: goal ≤ 1.5×. Peak RSS: goal ≤ the baseline's. The share of time
  outside the models (sandbox, novelty, glue): goal ≤ 10%. Against the machine: the iteration against
  the FLOPs its models need at this machine's matmul rate, phase by phase: goal ≤ 2×.
- Solver sampling as `codeplay evaluate` runs it (`engine.py`: 40 puzzles x 8 attempts x 96 tokens) against the
  tree before the sampling engine refilled finished rows: tokens/s, goal >= 2x, and >= 0.35 of the roofline.
- A PPO minibatch's forward + backward with its activations kept and recomputed (`recompute.py`): seconds and
  the bytes saved for the backward.
- Self-play (`selfplay.py`): the initial Solver's re-judge and a BC phase of `configs/selfplay.yaml` against the
  rest of its iterations. Goal: ≤ 30%.
- The Setter's sampler (streams restarting in place) against Hugging Face `generate` at the same
  batch: tokens/s, goal ≥ 1×.
- Sampling against the machine's limit (`roofline.py`): the matmul rate at the model's decode shapes gives
  tokens/s at 100%; the Setter's streams at 32 and 64 and the Solver's `sample()` at 64 as fractions of it,
  with fp32 and bf16 weights. Goal: >= 50% at 64 rows.
- Solver sampling tokens/s at batch 32 against one sequence at a time, embedded model, on the
  Solver's own prompts, with fp32 and with bf16 weights. Goal: ≥ 8×.
- The same prompts through the search's LLM backends: HFLLM at batch 1 and 32, and OpenAILLM
  (1 and 32 requests in flight) against a local llama.cpp server (skipped, with the reason, when
  llama_cpp is not installed), as ratios to HFLLM at batch 1.
- Code World Models (paper table 7): a CWM's step against the true environment's and one LLM call.
"""

from __future__ import annotations

import json
import multiprocessing
import platform
from pathlib import Path

from benchmarks.sandbox import bench_ray, bench_sandbox, bench_workers


def run_benchmarks(out: Path, pairs: int, with_model: bool) -> dict:
    results = {
        "machine": {
            "python": platform.python_version(),
            "cpus": multiprocessing.cpu_count(),
            "processor": platform.processor() or platform.machine(),
        }
    }
    print(f"sandbox: {pairs} programs, sandbox vs bare forks vs naive harness vs in-process exec ...", flush=True)
    results["sandbox"] = sandbox = bench_sandbox(pairs)
    rows = [
        ("sandbox verdicts/s", f"{sandbox['sandbox_verdicts_per_s']:.0f}", ""),
        ("bare fork+exit+wait loops/s", f"{sandbox['bare_forks_per_s']:.0f}", "minimal Python, 2 at once"),
        ("sandbox / bare forks", f"{sandbox['fraction_of_bare_forks']:.2f}", "goal >= 0.25"),
        ("naive harness verdicts/s", f"{sandbox['naive_verdicts_per_s']:.0f}", ""),
        ("in-process exec verdicts/s", f"{sandbox['inprocess_verdicts_per_s']:.0f}", ""),
        ("sandbox / naive", f"{sandbox['speedup_vs_naive']:.1f}x", ""),
        ("sandbox / in-process", f"{sandbox['fraction_of_inprocess']:.2f}", "the ceiling is 1"),
        ("identical verdicts", str(sandbox["identical_verdicts"]), "required"),
    ]
    print("judging an iteration's programs with 1 worker, 2 and auto's ...", flush=True)
    results["workers"] = scaling = bench_workers()
    rows += [
        (
            f"judging {scaling['programs']} programs, {workers} worker(s): seconds",
            f"{seconds:.2f}",
            f"{scaling['speedup_over_one'][workers]:.2f}x one worker's speed"
            + (" (auto here)" if workers == scaling["usable_cores"] else ""),
        )
        for workers, seconds in scaling["seconds"].items()
    ]
    print(f"sandbox backends: {pairs} programs, local vs ray, 2 workers each ...", flush=True)
    results["ray"] = backends = bench_ray(pairs)
    if "skipped" in backends:
        rows.append(("ray backend verdicts/s", "skipped", backends["skipped"]))
    else:
        rows += [
            (
                "local backend verdicts/s",
                f"{backends['local_verdicts_per_s']:.0f}",
                "mean of a run before and after: {:.0f}, {:.0f}".format(*backends["local_runs_verdicts_per_s"]),
            ),
            ("ray backend verdicts/s", f"{backends['ray_verdicts_per_s']:.0f}", "a local Ray instance"),
            ("ray / local", f"{backends['ray_over_local']:.2f}", f"same verdicts: {backends['identical_verdicts']}"),
        ]
    print("novelty archive: hnswlib 5-NN vs exact numpy search at 100k ...", flush=True)
    # Imported only now: torch and its threads in this process would slow the naive harness's forks
    from benchmarks.archive import bench_knn
    from benchmarks.loop import bench_loop
    from benchmarks.models import bench_sampling, bench_setter_sampler, bench_solver_backends

    results["knn"] = knn = bench_knn()
    rows += [
        ("5-NN queries/s, hnswlib at 100k", f"{knn['hnsw_queries_per_s']}", ""),
        ("5-NN queries/s, exact numpy", f"{knn['exact_queries_per_s']}", ""),
        ("hnswlib / exact", f"{knn['speedup']}x", "goal >= 20x"),
        ("hnswlib recall@5", f"{knn['recall_at_5']}", "goal >= 0.95"),
    ]
    if with_model:
        print(
            "one CPU-scale training iteration (configs/balanced.yaml), baseline commit then this tree ...", flush=True
        )
        results["loop"] = loop = bench_loop()
        base, same, now = loop["baseline"], loop["current_at_previous_scale"], loop["current"]
        rows += [
            ("baseline, its scale: puzzles/hour", f"{base['puzzles_per_hour']:.0f}", f"{base['seconds']:.0f} s"),
            ("this tree, same scale: puzzles/hour", f"{same['puzzles_per_hour']:.0f}", f"{same['seconds']:.0f} s"),
            ("this tree, today's scale: puzzles/hour", f"{now['puzzles_per_hour']:.0f}", f"{now['seconds']:.0f} s"),
            ("puzzles/hour vs baseline, same config", f"{loop['speedup_same_config']:.2f}x", "goal >= 2.5x"),
            ("puzzles/hour vs baseline, each its scale", f"{loop['speedup_each_at_its_scale']:.2f}x", ""),
            (
                "limit: bare PPO + sampling seconds",
                f"{loop['limit_seconds']:.0f}",
                f"{loop['limit_bare_update_seconds']:.0f} + {loop['limit_sampling_seconds']:.0f}",
            ),
            (
                "PPO update / bare update",
                f"{now['ppo_update_seconds'] / loop['limit_bare_update_seconds']:.2f}x",
                "the prompt, value head, optimizer",
            ),
            ("iteration / limit", f"{loop['iteration_over_limit']:.2f}x", "goal <= 1.5x"),
            (
                "peak RSS GiB, this tree same scale",
                f"{same['peak_rss_gib']:.2f}",
                f"baseline {base['peak_rss_gib']:.2f}; goal <= it",
            ),
            ("peak RSS GiB, this tree today's scale", f"{now['peak_rss_gib']:.2f}", ""),
            ("share outside the models", f"{now['outside_models_frac']:.3f}", "goal <= 0.10"),
        ]
        flops = loop["against_flops"]
        rows += [
            (
                f"{phase} seconds / its FLOPs' seconds",
                f"{flops['seconds_measured'][phase] / flops['seconds_at_rate'][phase]:.2f}x",
                f"{flops['gflop'][phase]:.0f} GFLOP",
            )
            for phase in flops["gflop"]
        ]
        rows.append(
            (
                "iteration / its FLOPs at the matmul rate",
                f"{flops['iteration_over_flops']:.2f}x",
                f"{flops['precision']}, {flops['matmul_gflops_64_rows']:.0f} and {flops['matmul_gflops_512_rows']:.0f}"
                " GFLOP/s at 64 and 512 rows; goal <= 2x",
            )
        )
        print("Solver sampling as `codeplay evaluate` runs it, the tree before the sampling engine then this one ...")
        from benchmarks.engine import bench_engine

        results["engine"] = engine = bench_engine()
        rows += [
            (
                "Solver sampling tok/s, this tree vs baseline",
                f"{max(engine['this_tree_tokens_per_s']):.0f} vs {max(engine['baseline_tokens_per_s']):.0f}",
                engine["workload"],
            ),
            ("Solver sampling vs baseline", f"{engine['speedup']:.2f}x", "goal >= 2x"),
            (
                "Solver sampling / roofline",
                f"{engine['this_tree_of_roofline']:.2f}",
                f"baseline {engine['baseline_of_roofline']:.2f}; goal >= 0.35",
            ),
            (
                "same completions as the baseline",
                f"{engine['same_completions']:.3f}",
                "share; rounding differs by batch shape",
            ),
        ]
        print("a PPO minibatch with its activations kept, then recomputed (trainer.recompute_activations) ...")
        from benchmarks.recompute import bench_recompute

        results["recompute"] = recompute = bench_recompute()
        rows += [
            (
                "PPO minibatch s, kept vs recomputed",
                f"{min(recompute['kept_seconds']):.1f} vs {min(recompute['recomputed_seconds']):.1f}",
                f"{recompute['action_tokens']} action tokens, {recompute['precision']}",
            ),
            ("PPO minibatch recomputed / kept", f"{recompute['time_ratio']:.2f}x", "one more forward pass"),
            (
                "GiB saved for the backward, kept vs recomputed",
                f"{recompute['kept_saved_gib']:.2f} vs {recompute['recomputed_saved_gib']:.2f}",
                "activations, weights left out",
            ),
        ]
        print("self-play: the initial Solver's re-judge and a BC phase against the rest (configs/selfplay.yaml) ...")
        from benchmarks.selfplay import bench_selfplay

        results["selfplay"] = selfplay = bench_selfplay()
        rows += [
            (
                f"self-play, {selfplay['iterations']} iterations: rest of the loop s",
                f"{selfplay['rest_seconds']:.0f}",
                f"{selfplay['bc']['steps']} BC steps on {selfplay['bc']['new_pairs']} new pairs",
            ),
            (
                "self-play: re-judge + BC s",
                f"{selfplay['rejudge_seconds']:.0f} + {selfplay['bc_seconds']:.0f}",
                f"rejudge_share {selfplay['rejudge_share']:g}",
            ),
            ("self-play: (re-judge + BC) / rest", f"{selfplay['added_over_rest']:.2f}", "goal <= 0.30"),
        ]
        print("Setter sampler vs Hugging Face generate, same batch, bf16 autocast ...", flush=True)
        results["setter_sampler"] = sampler = bench_setter_sampler()
        rows += [
            ("sample_streams tok/s", f"{sampler['sample_streams_tokens_per_s']:.1f}", ""),
            ("HF generate tok/s", f"{sampler['hf_generate_tokens_per_s']:.1f}", ""),
            ("sample_streams / generate", f"{sampler['sampler_over_generate']:.2f}x", "goal >= 1x"),
        ]
        print("sampling: embedded model, batch 32 vs batch 1 ...", flush=True)
        results["sampling"] = sampling = bench_sampling()
        for precision in ("fp32", "bf16"):
            numbers = sampling[precision]
            rows += [
                (f"sampling {precision} batch 1 tok/s", f"{numbers['batch1_tokens_per_s']:.1f}", ""),
                (f"sampling {precision} batch 32 tok/s", f"{numbers['batch32_tokens_per_s']:.1f}", ""),
                (f"sampling {precision} batch 32 / batch 1", f"{numbers['speedup']:.1f}x", "goal >= 8x"),
            ]
        print("sampling against the roofline: matmul rate at the decode shapes, fp32 and bf16 weights ...", flush=True)
        from benchmarks.roofline import bench_roofline

        results["roofline"] = roof = bench_roofline()
        rows.append(("bf16 native on this CPU (AMX / AVX512-BF16)", str(roof["native_bf16"]), ""))
        for precision in ("fp32", "bf16"):
            numbers = roof[precision]
            rows += [
                (
                    f"{precision} roofline at 64 rows, tok/s",
                    f"{numbers['roofline_64_tokens_per_s']:.0f}",
                    f"{numbers['matmul_64_gflops']:.0f} GFLOP/s x {numbers['gflop_per_token']:.2f} GFLOP/token",
                ),
                *(
                    (
                        f"{precision} {label}, tok/s",
                        f"{numbers[f'{key}_tokens_per_s']:.0f}",
                        f"{numbers[f'{key}_of_roofline']:.2f} of the roofline" + goal,
                    )
                    for key, label, goal in (
                        ("setter_streams_32", "Setter streams 32", ""),
                        ("setter_streams_64", "Setter streams 64", "; goal >= 0.50"),
                        ("solver_sample_64", f"Solver sample() 64 x {roof['steps']} tokens", ""),
                        (
                            "solver_sample_64_budget",
                            f"Solver sample() 64 x {roof['solver_budget']} tokens (the CPU scale's)",
                            "; goal >= 0.50",
                        ),
                    )
                ),
            ]
        print("solver backends: HFLLM batch 1 and 32 vs a llama.cpp server, embedded model ...", flush=True)
        results["solver_backends"] = backends = bench_solver_backends()
        rows += [
            (f"HFLLM {backends['hf_dtype']} batch 1 tok/s", f"{backends['hf_batch1_tokens_per_s']:.1f}", ""),
            (
                f"HFLLM {backends['hf_dtype']} batch 32 tok/s",
                f"{backends['hf_batch32_tokens_per_s']:.1f}",
                f"{backends['hf_batch32_over_batch1']:.1f}x batch 1",
            ),
        ]
        if "server_skipped" in backends:
            rows.append(("llama.cpp server tok/s", "skipped", backends["server_skipped"]))
        else:
            for concurrency in (1, 32):
                name = f"server_concurrency{concurrency}"
                rows.append(
                    (
                        f"llama.cpp server, {concurrency} in flight, tok/s",
                        f"{backends[f'{name}_tokens_per_s']:.1f}",
                        f"{backends[f'{name}_over_hf_batch1']:.1f}x HFLLM batch 1",
                    )
                )
        print(
            "Code World Models: a model's step vs the true environment's vs one LLM call (paper table 7) ...",
            flush=True,
        )
        from benchmarks.cwm import bench_cwm

        results["cwm"] = cwm = bench_cwm()
        rows += [
            ("CWM step, CartPole example, in process", f"{cwm['cwm_step_us']:.1f} us", ""),
            (
                "CWM step, in its sandboxed process",
                f"{cwm['cwm_sandboxed_step_us']:.1f} us",
                f"{cwm['transitions']} transitions, a process each",
            ),
            (
                "true environment step, gymnasium",
                f"{cwm['true_env_step_us']:.1f} us",
                f"CWM / true env {cwm['cwm_over_true_env']:.1f}x",
            ),
            (
                "one LLM call, embedded model",
                f"{cwm['llm_call_s']:.1f} s",
                f"{cwm['llm_completion_tokens']} tokens; {cwm['llm_call_over_cwm_step']:.0f}x a CWM step",
            ),
        ]
    width = max(len(row[0]) for row in rows)
    for name, value, goal in rows:
        print(f"  {name:<{width}}  {value:>10}  {goal}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written to {out}")
    return results
