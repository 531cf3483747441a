"""`codeplay cwm`: build, score and plan through the command line, and its one-line errors."""

from __future__ import annotations

import json

import pytest
from support import REPO

from codeplay_lightning.cli import main

pytest.importorskip("gymnasium")
EXAMPLE = str(REPO / "codeplay_lightning" / "cwm" / "examples" / "cartpole.py")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("cwm")
    assert main(["cwm", "build", "--out", str(out), "--envs", "CartPole-v1,Taxi-v3", "--seed", "1"]) == 0
    return out


def test_build_writes_both_splits_and_a_summary(data):
    rows = json.loads((data / "summary.json").read_text())
    assert [row["env"] for row in rows] == ["CartPole-v1", "Taxi-v3"]
    assert all(row["search"] > row["heldout"] > 0 for row in rows)
    assert all(row["better_return"] > row["random_return"] for row in rows)


def test_score_the_example_and_the_true_environment(data, capsys):
    assert main(["cwm", "score", "--data", str(data), "--env", "CartPole-v1", "--program", EXAMPLE]) == 0
    example = json.loads(capsys.readouterr().out)
    assert example["bug"] is None and example["search"]["accuracy"] > 0.99 and example["heldout"]["accuracy"] > 0.99
    assert main(["cwm", "score", "--data", str(data), "--env", "Taxi-v3", "--true-env"]) == 0
    true = json.loads(capsys.readouterr().out)
    assert true["search"]["accuracy"] == true["heldout"]["accuracy"] == 1.0


def test_plan_writes_r(data, tmp_path):
    assert (
        main(["cwm", "plan", "--env", "CartPole-v1", "--program", EXAMPLE, "--episodes", "1", "--out", str(tmp_path)])
        == 0
    )
    record = json.loads((tmp_path / "planning.json").read_text())
    assert record["model_bug"] == "" and len(record["model_returns"]) == 1 and record["settings"]["samples"] == 100


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["cwm", "score", "--data", "{data}", "--env", "Pong-v0", "--true-env"], "unknown environment 'Pong-v0'"),
        (["cwm", "score", "--data", "{data}", "--env", "Acrobot-v1", "--true-env"], "run `codeplay cwm build"),
        (
            ["cwm", "score", "--data", "{data}", "--env", "CartPole-v1", "--program", "pyproject.toml"],
            "defines no class Environment",
        ),
        (["cwm", "build", "--out", "{data}/x", "--envs", "Taxi-v3", "--official", "{data}"], "holds no"),
    ],
)
def test_bad_input_is_one_line(data, capsys, argv, message):
    assert main([item.replace("{data}", str(data)) for item in argv]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error:") and message in error and "\n" not in error


@pytest.mark.parametrize(
    "option, cuda, capability, cpu_bf16, device, dtype",
    [
        ([], False, None, True, "cpu", "bfloat16"),  # a CPU with AMX or AVX512-BF16
        ([], False, None, False, "cpu", "float32"),  # an AVX2 CPU only emulates bf16
        ([], True, (8, 0), False, "cuda", "bfloat16"),
        (["--device", "cuda"], True, (7, 0), True, "cuda", "float32"),  # before Ampere bf16 is only emulated
        (["--device", "cpu"], True, None, True, "cpu", "bfloat16"),
    ],
)
def test_synthesize_loads_the_model_on_the_device_in_a_dtype_it_runs(
    data, monkeypatch, model_loads, option, cuda, capability, cpu_bf16, device, dtype
):
    import torch

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: cpu_bf16)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: capability)
    assert (
        main(
            [
                "cwm",
                "synthesize",
                "--data",
                str(data),
                "--env",
                "CartPole-v1",
                "--out",
                str(data / "synthesis"),
                *option,
            ]
        )
        == 2
    )
    assert [(load["device"], load["dtype"]) for load in model_loads] == [(device, getattr(torch, dtype))]
