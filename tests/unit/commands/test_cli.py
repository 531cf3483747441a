"""The `codeplay` command line: every command's help, a parser that imports no torch, the shared options;
`codeplay verify` and `codeplay evaluate` end to end, and the puzzle-file reader behind them."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import CONFIGS, FIXTURES

from codeplay_lightning.cli import COMMANDS, build_parser, main
from codeplay_lightning.commands import cwm
from codeplay_lightning.config import ConfigError, RolloutConfig, SolverConfig, load_config, resume_checkpoint
from codeplay_lightning.puzzles import load_p3
from codeplay_lightning.puzzles.files import read_puzzle_file

FIXTURE_P3 = FIXTURES / "p3_small" / "puzzles.json"
F_HELLO = "def f(s: str):\n    return 'Hello ' + s == 'Hello world'"


def write_jsonl(path: Path, lines: list) -> Path:
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def read_verdicts(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_verify_writes_one_verdict_per_line_and_bad_lines_get_syntax(tmp_path, capsys):
    source = write_jsonl(
        tmp_path / "pairs.jsonl",
        [
            {"name": "right", "f": F_HELLO, "g": "def g():\n    return 'world'", "extra": 1},
            {"name": "wrong", "f": F_HELLO, "g": "def g():\n    return 'earth'"},
            "{not json",
            {"name": "no_f", "g": "def g():\n    return 1"},
            {"name": "typed", "f": "def f(x):\n    return x == 3", "g": "def g():\n    return 3.0", "ans_type": "int"},
        ],
    )
    out = tmp_path / "out" / "verdicts.jsonl"
    assert main(["verify", str(source), "--out", str(out), "--workers", "1"]) == 0
    verdicts = read_verdicts(out)
    assert [v["status"] for v in verdicts] == ["pass", "fail", "syntax", "syntax", "fail"]
    assert [v["name"] for v in verdicts][:2] == ["right", "wrong"]
    assert "line 3 is not JSON" in verdicts[2]["detail"]
    assert "no string field 'f'" in verdicts[3]["detail"]
    assert "not of type int" in verdicts[4]["detail"]
    assert all(set(v) == {"name", "status", "detail", "seconds"} for v in verdicts)
    printed = capsys.readouterr().out
    assert "pass: 1" in printed and "syntax: 2" in printed and "verdicts/s" in printed
    assert re.search(r"isolation: (full|partial|basic): ", printed)  # the level, then how it isolates


def test_verify_checks_every_reference_solution_of_a_p3_file(tmp_path):
    out = tmp_path / "p3.jsonl"
    assert main(["verify", str(FIXTURE_P3), "--out", str(out)]) == 0
    puzzles = load_p3(FIXTURE_P3)
    expected_names = [p.name for p in puzzles for _ in p.solutions]
    verdicts = read_verdicts(out)
    assert [v["name"] for v in verdicts] == expected_names
    assert all(v["status"] == "pass" for v in verdicts), verdicts


def test_unreadable_file_is_a_one_line_error(tmp_path, capsys):
    assert main(["verify", str(tmp_path / "missing.jsonl")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: cannot read") and "\n" not in error


@pytest.mark.parametrize(
    "option, value",
    [("--timeout", value) for value in ("nan", "inf", "1e300", "0", "-1", "soon")]
    + [("--workers", value) for value in ("0", "257", "1.5", "two")],
)
def test_a_bad_sandbox_option_is_refused_before_anything_runs(tmp_path, capsys, option, value):
    source = write_jsonl(tmp_path / "pairs.jsonl", [{"f": F_HELLO, "g": "def g():\n    return 'world'"}])
    with pytest.raises(SystemExit) as exit_info:
        main(["verify", str(source), option, value])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"argument {option}: '{value}'" in error and option.removeprefix("--") + " must be" in error


def test_program_text_cannot_drive_the_terminal(tmp_path, capsys):
    """A detail with escape sequences (or a lone surrogate) is printed escaped, never interpreted."""
    raising = "def g():\n    raise ValueError('\\x1b[2J\\x1b[Hall passed \\ud800')"
    source = write_jsonl(tmp_path / "pairs.jsonl", [{"name": "evil\x1b[31m", "f": F_HELLO, "g": raising}])
    out = tmp_path / "verdicts.jsonl"
    assert main(["verify", str(source), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "\x1b" not in printed and "\\x1b[2J" in printed and "evil\\x1b[31m" in printed
    assert read_verdicts(out)[0]["status"] == "error"


def test_a_bad_out_fails_before_the_batch(tmp_path, capsys):
    source = write_jsonl(tmp_path / "pairs.jsonl", [{"f": F_HELLO, "g": "def g():\n    while True:\n        pass"}])
    (tmp_path / "file").write_text("")
    assert main(["verify", str(source), "--out", str(tmp_path / "file" / "verdicts.jsonl")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error:") and "\n" not in error


def test_an_empty_input_is_a_one_line_error(tmp_path, capsys):
    source = tmp_path / "empty.jsonl"
    source.write_text("")
    assert main(["verify", str(source)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error:") and "no (f, g) pair" in error and "\n" not in error


def test_reader_keeps_p3_instances_without_solutions_as_entries_without_g():
    entries = read_puzzle_file(FIXTURE_P3)
    puzzles = load_p3(FIXTURE_P3)
    assert len(entries) == sum(max(1, len(p.solutions)) for p in puzzles)
    unsolved = {p.name for p in puzzles if not p.solutions}
    assert unsolved and {e.name for e in entries if e.g is None} == unsolved


def test_evaluate_solver_writes_one_result_per_puzzle(tmp_path, tiny_model_dir, capsys):
    source = write_jsonl(
        tmp_path / "puzzles.jsonl",
        [
            {"name": "hello", "f": F_HELLO, "g": "ignored"},
            {"name": "three", "f": "def f(x: int):\n    return x == 3"},
            "{broken",
        ],
    )
    out = tmp_path / "eval"
    assert (
        main(
            [
                "evaluate",
                "--puzzles",
                str(source),
                "--attempts",
                "2",
                "--llm",
                str(tiny_model_dir),
                "--fewshot",
                "2",
                "--max-new-tokens",
                "6",
                "--batch-size",
                "3",
                "--dtype",
                "float32",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    results = [json.loads(line) for line in (out / "puzzles.jsonl").read_text().splitlines()]
    assert [r["name"] for r in results] == ["hello", "three"]
    for result in results:
        assert result["attempts"] == 2 and sum(result["statuses"].values()) == 2
        assert [t["status"] for t in result["tries"]].count("pass") == result["passes"]
        assert all(t["g"].startswith("def g():") for t in result["tries"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["puzzles"] == 2 and 0 <= summary["pass@1"] <= summary["pass@2"] <= 1
    captured = capsys.readouterr()
    assert "line 3 is not JSON" in captured.err and "pass@2" in captured.out


def test_evaluate_reads_one_split_of_a_corpus_file(tmp_path, tiny_model_dir):
    corpus = tmp_path / "corpus.json"
    assert main(["corpus", "--n", "12", "--seed", "3", "--out", str(corpus)]) == 0
    entries = json.loads(corpus.read_text())
    assert len(entries) == 12 and {"family", "grade", "split"} <= set(entries[0])
    train = [e["name"] for e in entries if e["split"] == "train"]
    out = tmp_path / "eval"
    assert (
        main(
            [
                "evaluate",
                "--puzzles",
                str(corpus),
                "--split",
                "train",
                "--limit",
                "5",
                "--attempts",
                "1",
                "--llm",
                str(tiny_model_dir),
                "--fewshot",
                "1",
                "--max-new-tokens",
                "4",
                "--dtype",
                "float32",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in (out / "puzzles.jsonl").read_text().splitlines()]
    assert [row["name"] for row in rows] == train[:5]
    assert all(row["group"] == row["name"].split(":")[0] for row in rows)
    assert (
        main(["evaluate", "--puzzles", str(corpus), "--split", "test", "--llm", str(tiny_model_dir), "--out", str(out)])
        == 2
    )


def test_evaluate_setter_reports_rates(tmp_path, tiny_model_dir):
    out = tmp_path / "setter"
    assert (
        main(
            [
                "evaluate",
                "--setter",
                "3",
                "--attempts",
                "1",
                "--llm",
                str(tiny_model_dir),
                "--fewshot",
                "1",
                "--max-new-tokens",
                "8",
                "--dtype",
                "float32",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    rows = [json.loads(line) for line in (out / "puzzles.jsonl").read_text().splitlines()]
    assert summary["puzzles"] == len(rows) == 3
    assert summary["valid"] == sum(row["valid"] for row in rows) / 3
    assert all(row["r_n"] >= 0 for row in rows)


def test_the_adapter_aliases_without_their_adapters_say_how_to_build_them(tmp_path):
    from codeplay_lightning.models.loading import gif_model_dir, warmstart_model_dir

    with pytest.raises(FileNotFoundError, match="smollm2-135m-sft needs .*: run `make warmstart`"):
        warmstart_model_dir(tmp_path / "no-adapter")
    with pytest.raises(FileNotFoundError, match="smollm2-135m-gif needs .*: run `make warmstart-gif`"):
        gif_model_dir(tmp_path / "no-adapter")


def test_an_adapter_alias_is_its_base_with_the_adapter_merged_once(tmp_path, tiny_model_dir, monkeypatch):
    """How `smollm2-135m-gif` stacks its adapter on the warm start: merged into the base's weights, cached."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model

    from codeplay_lightning.models import load_causal_lm
    from codeplay_lightning.models.loading import _adapted_model_dir

    monkeypatch.setenv("CODEPLAY_CACHE", str(tmp_path / "cache"))
    base, _ = load_causal_lm(str(tiny_model_dir))
    adapted = get_peft_model(base, LoraConfig(r=2, target_modules="all-linear", init_lora_weights=False))
    adapted.save_pretrained(tmp_path / "adapter")
    rng = torch.random.get_rng_state()
    merged_dir = _adapted_model_dir("tiny-adapted", tmp_path / "adapter", "make it", lambda: tiny_model_dir)
    # the first run merges, later ones load: its value head must be drawn from the same random numbers as theirs
    assert torch.equal(torch.random.get_rng_state(), rng)
    assert merged_dir.parent == tmp_path / "cache" and merged_dir.name.startswith("tiny-adapted-")
    merged, _ = load_causal_lm(str(merged_dir))
    fresh, _ = load_causal_lm(str(tiny_model_dir))
    expected = PeftModel.from_pretrained(fresh, tmp_path / "adapter").merge_and_unload()
    ids = torch.arange(3, 20).unsqueeze(0)
    torch.testing.assert_close(merged(ids).logits, expected(ids).logits)
    assert not torch.allclose(merged(ids).logits, load_causal_lm(str(tiny_model_dir))[0](ids).logits)
    assert _adapted_model_dir("tiny-adapted", tmp_path / "adapter", "make it", lambda: tiny_model_dir) == merged_dir


@pytest.mark.parametrize(
    "command",
    [
        ["evaluate", "--setter", "1", "--out", "{tmp}/eval"],
        ["synthesize", "--task", "p3", "bundled", "--limit", "1", "--out", "{tmp}/synthesis"],
    ],
)
@pytest.mark.parametrize(
    "option, cuda, capability, cpu_bf16, device, dtype",
    [
        ([], False, None, True, "cpu", "bfloat16"),  # a CPU with AMX or AVX512-BF16
        ([], False, None, False, "cpu", "float32"),  # an AVX2 CPU only emulates bf16
        ([], True, (8, 0), False, "cuda", "bfloat16"),
        (["--device", "cuda:1"], True, (7, 5), True, "cuda:1", "float32"),  # before Ampere bf16 is only emulated
        (["--device", "cpu", "--dtype", "float32"], True, None, True, "cpu", "float32"),
    ],
)
def test_the_device_and_dtype_reach_the_model_loader(
    tmp_path, monkeypatch, model_loads, command, option, cuda, capability, cpu_bf16, device, dtype
):
    import torch

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: cpu_bf16)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2 if cuda else 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: capability)
    assert main([item.replace("{tmp}", str(tmp_path)) for item in command + option]) == 2
    assert [(load["device"], load["dtype"]) for load in model_loads] == [(device, getattr(torch, dtype))]


@pytest.mark.parametrize(
    "device, message",
    [
        ("gpu", "'gpu' is not a device: auto, cpu, cuda or cuda:N"),
        ("cuda:x", "'cuda:x' is not a device"),
        ("cuda", "'cuda': CUDA is not available"),
    ],
)
def test_a_bad_device_is_one_line_before_any_model_loads(tmp_path, monkeypatch, capsys, model_loads, device, message):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--setter", "1", "--device", device, "--out", str(tmp_path)])
    assert exit_info.value.code == 2 and not model_loads
    assert f"argument --device: {message}" in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("words", [[name] for name in COMMANDS] + [["cwm", action] for action in cwm.ACTIONS])
def test_every_command_and_cwm_action_explains_itself(capsys, words):
    with pytest.raises(SystemExit) as exit_info:
        main([*words, "--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    module = cwm.ACTIONS[words[1]] if len(words) == 2 else COMMANDS[words[0]]
    assert help_text.startswith(f"usage: codeplay {' '.join(words)} ")
    assert " ".join(module.HELP.split()) in " ".join(help_text.split())


def test_the_parser_imports_no_torch_transformers_or_lightning():
    """`codeplay verify` and `--help` start fast: only a command that loads a model imports them, when it runs."""
    check = (
        "import sys\nfrom codeplay_lightning.cli import build_parser\n"
        "build_parser().parse_args(['verify', 'pairs.jsonl', '--workers', '3', '--timeout', '2'])\n"
        "print(sorted({'torch', 'transformers', 'lightning'} & set(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_evaluate_samples_as_the_configs_do():
    args = build_parser().parse_args(["evaluate", "--setter", "1", "--out", "eval"])
    assert (args.max_new_tokens, args.temperature, args.fewshot) == (
        SolverConfig.max_new_tokens,
        SolverConfig.temperature,
        RolloutConfig.fewshot,
    )


def test_both_synthesis_commands_sample_alike():
    keys = ("llm", "dtype", "seed", "max_new_tokens", "temperature", "top_p", "top_k")
    programs = vars(build_parser().parse_args(["synthesize", "--task", "p3", "bundled"]))
    models = vars(build_parser().parse_args(["cwm", "synthesize", "--data", "d", "--env", "e", "--out", "o"]))
    assert {key: programs[key] for key in keys} == {key: models[key] for key in keys}


@pytest.mark.parametrize("checkpointed", [True, False], ids=["an iteration finished", "none finished"])
def test_a_stopped_train_says_how_to_resume_only_when_its_own_checkpoint_stands(
    tmp_path, monkeypatch, capsys, checkpointed
):
    """SIGTERM lands while `train` runs (here: a stand-in that starts version_1 and is stopped); version_0, an
    earlier run's with a checkpoint, must not count as this run's."""
    import signal

    from codeplay_lightning import train as train_module
    from codeplay_lightning.commands import train as train_command

    run = tmp_path / "runs" / "smoke" / "version_1"

    def stopped_train(config, resume=None):
        folder = run
        (folder / "checkpoints").mkdir(parents=True)
        if checkpointed:
            (folder / "checkpoints" / "last.ckpt").write_bytes(b"")
        raise train_command.Stopped

    (tmp_path / "runs" / "smoke" / "version_0" / "checkpoints").mkdir(parents=True)
    (tmp_path / "runs" / "smoke" / "version_0" / "checkpoints" / "last.ckpt").write_bytes(b"")
    monkeypatch.setattr(train_module, "train", stopped_train)
    monkeypatch.setattr(train_command, "keep_freed_memory_on_cpu", lambda accelerator: None)
    monkeypatch.setattr(signal, "signal", lambda number, handler: None)
    status = main(["train", str(CONFIGS / "smoke.yaml"), f"trainer.run_root={tmp_path / 'runs'}"])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert status == 143
    if checkpointed:  # this run's own folder, not --resume auto (which names the newest)
        assert last.startswith("stopped by SIGTERM: the last finished iteration's checkpoint stands; resume with:")
        assert last.endswith(f" train {CONFIGS / 'smoke.yaml'} trainer.run_root={tmp_path / 'runs'} --resume {run}")
    else:
        assert last == (
            f"stopped by SIGTERM before the first iteration finished ({tmp_path / 'runs' / 'smoke' / 'version_1'}): "
            "no checkpoint to resume; train again to start afresh"
        )


def test_the_resume_line_speaks_the_users_dialect_and_names_the_run(monkeypatch):
    from codeplay_lightning.commands.train import _resume

    run = Path("runs/smoke/version_3")
    monkeypatch.setattr(sys, "argv", [".venv/bin/codeplay", "train"])
    monkeypatch.delenv("MAKELEVEL", raising=False)
    typed = _resume(["configs/smoke.yaml", "ppo.lr=1e-5"], run)
    assert typed == ".venv/bin/codeplay train configs/smoke.yaml ppo.lr=1e-5 --resume runs/smoke/version_3"
    monkeypatch.setenv("MAKELEVEL", "1")  # make train CONFIG=smoke ARGS="..." runs the same command
    assert _resume(["configs/smoke.yaml", "ppo.lr=1e-5", "trainer.seed=2"], run) == (
        "make train CONFIG=smoke 'ARGS=ppo.lr=1e-5 trainer.seed=2' RESUME=runs/smoke/version_3"
    )
    assert _resume(["configs/smoke.yaml"], run) == "make train CONFIG=smoke RESUME=runs/smoke/version_3"
    # two files are no make preset: the codeplay command
    assert _resume(["configs/smoke.yaml", "configs/paper.yaml"], run).endswith("--resume runs/smoke/version_3")
    monkeypatch.delenv("MAKELEVEL")  # python -m codeplay_lightning.cli (as a sweep runs each preset)
    monkeypatch.setattr(sys, "argv", ["/work/codeplay_lightning/cli.py", "train"])
    assert _resume(["configs/none.yaml"], run) == (
        f"{sys.executable} -m codeplay_lightning.cli train configs/none.yaml --resume runs/smoke/version_3"
    )


def test_resume_takes_a_run_folder(tmp_path):
    config = load_config([CONFIGS / "smoke.yaml"], [f"trainer.run_root={tmp_path}"])
    run = tmp_path / "smoke" / "version_0"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert resume_checkpoint(config, str(run)) == run / "checkpoints" / "last.ckpt"
    with pytest.raises(ConfigError, match=r"checkpoint .*version_1 does not exist"):
        resume_checkpoint(config, str(run.parent / "version_1"))
