"""What a user expects of any command line: `--version`, usage mistakes and missing inputs in one line before
torch loads, `train --help` listing the keys and presets, `train --print-config`, and `codeplay env`."""

import contextlib
import io
import json
import subprocess
import sys
from dataclasses import fields
from importlib.metadata import version

import pytest
from support import CONFIGS, REPO

from codeplay_lightning.cli import main
from codeplay_lightning.config import TrainConfig, TrainerConfig, load_config
from codeplay_lightning.devices import PACKAGES, resolved_precision


def test_version_is_the_installed_distributions(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"codeplay {version('codeplay_lightning')}"


MISTAKES = [
    (["evaluate", "--puzzles", "missing.json", "--out", "o"], "argument --puzzles: 'missing.json' does not exist"),
    (["sft", "missing.json", "--out", "o"], "argument SOURCE: 'missing.json' does not exist"),
    (["synthesize", "--task", "p3", "bundled", "--method", "gif"], "argument --method: invalid choice: 'gif'"),
    (["train", str(CONFIGS / "smoke.yaml"), "--resume", "missing.ckpt"], "checkpoint missing.ckpt does not exist"),
    (["train", str(CONFIGS / "balancd.yaml")], f"did you mean {CONFIGS / 'balanced.yaml'}?"),
    (["trian"], "argument command: invalid choice: 'trian'"),
]


def test_mistakes_and_missing_inputs_are_one_line_before_torch_loads():
    script = (
        "import contextlib, io, json, sys\nfrom codeplay_lightning.cli import main\n"
        "for argv in json.loads(sys.argv[1]):\n"
        "    err = io.StringIO()\n"
        "    with contextlib.redirect_stderr(err):\n"
        "        try:\n            code = main(argv)\n"
        "        except SystemExit as exit:\n            code = exit.code\n"
        "    print(json.dumps([code, err.getvalue()]))\n"
        "print(json.dumps(sorted({'torch', 'transformers', 'lightning'} & set(sys.modules))))\n"
    )
    argvs = json.dumps([argv for argv, _ in MISTAKES])
    result = subprocess.run([sys.executable, "-c", script, argvs], capture_output=True, text=True, check=True)
    *answers, imported = result.stdout.splitlines()
    assert json.loads(imported) == []
    for (_, message), answer in zip(MISTAKES, answers, strict=True):
        code, stderr = json.loads(answer)
        assert code == 2 and stderr.count("\n") == 1 and message in stderr, stderr


def test_train_help_lists_every_key_by_section_and_the_presets(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    lines = capsys.readouterr().out.splitlines()
    for section in fields(TrainConfig):
        keys = " ".join(key.name for key in fields(section.default_factory)) if section.name != "name" else ""
        assert f"  {section.name}: {keys}".rstrip(": ") in [line.rstrip() for line in lines]
    presets = next(line for line in lines if line.startswith("presets (configs/): ")).split(": ")[1].split()
    assert presets == sorted(path.stem for path in CONFIGS.glob("*.yaml"))


def test_print_config_is_the_merged_config_and_loads_back_as_it(tmp_path, capsys):
    argv = [str(CONFIGS / "novelty.yaml"), "ppo.lr=2e-6", "trainer.loggers=[csv]"]
    assert main(["train", *argv, "--print-config"]) == 0
    printed = tmp_path / "printed.yaml"
    printed.write_text(capsys.readouterr().out)
    assert load_config([printed]) == load_config(argv[:1], argv[1:])
    assert load_config([printed]).ppo.lr == 2e-6


def test_env_reports_versions_devices_and_the_sandbox(capsys):
    assert main(["env"]) == 0
    rows = dict(line.removeprefix("- ").split(": ", 1) for line in capsys.readouterr().out.splitlines())
    assert {name: rows[name] for name in PACKAGES} == {name: version(name) for name in PACKAGES}
    assert rows["trainer.precision=auto"] == resolved_precision(TrainerConfig())
    assert rows["sandbox"].split()[0] in ("full", "partial", "basic")
    assert "native bf16: " in rows["cpu"] and ("cuda" in rows or "cuda:0" in rows)


def test_one_line_errors_name_the_help_to_read():
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit):
        main(["export"])
    assert err.getvalue() == (
        "codeplay export: error: the following arguments are required: checkpoint, --out (see codeplay export --help)\n"
    )
