"""What a user expects of any command line: `--version`, usage mistakes and missing inputs in one line before
torch loads, `train --help` listing every key as `key (default): meaning` (the schema's comments) and the presets,
`train --print-config`, and `codeplay env`."""

import contextlib
import io
import json
import re
import subprocess
import sys
from importlib.metadata import version

import pytest
from omegaconf import OmegaConf
from support import CONFIGS, REPO

from codeplay_lightning.cli import main
from codeplay_lightning.commands.train import schema_comments
from codeplay_lightning.config import TrainConfig, TrainerConfig, load_config, named_by_changes
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


def train_help_keys(lines: list[str]) -> dict[str, tuple[str, str]]:
    """`train --help`'s keys, `section.key` (or `key`) -> (the default as shown, the meaning, its lines joined)."""
    keys, section, key = {}, None, None
    for line in lines[lines.index("keys, as key (default): meaning (docs/training.md says more):") + 1 :]:
        if section_line := re.fullmatch(r"  (\w+):", line):
            section = section_line[1]
        elif key_line := re.match(r"( {2}| {4})(\w+) \((.*?)\): (.*)", line):
            key = key_line[2] if key_line[1] == "  " else f"{section}.{key_line[2]}"
            keys[key] = (key_line[3], key_line[4])
        elif line.startswith("      "):  # the meaning goes on
            keys[key] = (keys[key][0], f"{keys[key][1]} {line.strip()}")
    return keys


def test_train_help_shows_every_key_with_its_default_and_meaning_and_the_presets(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    lines = capsys.readouterr().out.splitlines()
    keys = train_help_keys(lines)
    defaults = OmegaConf.to_container(OmegaConf.structured(TrainConfig))
    schema = [
        f"{section}.{key}" if isinstance(value, dict) else section
        for section, value in defaults.items()
        for key in (value if isinstance(value, dict) else [None])
    ]
    assert list(keys) == schema  # every key, in the schema's order
    assert all(meaning for _, meaning in keys.values())
    base = tmp_path / "base.yaml"
    base.write_text("name: balanced\n")
    # each default as shown is what `key=value` takes, and gives the default
    assert load_config([base], [f"{key}={default}" for key, (default, _) in keys.items()]) == load_config([base])
    assert keys["model.lora_targets"][0] == "[q_proj, k_proj, v_proj, o_proj]" and keys["reward.reference"][0] == "null"
    source = [line.strip() for line in (REPO / "codeplay_lightning" / "config.py").read_text().splitlines()]
    comments = {  # the comments above a key, or at the end of its line, as config.py has them
        "trainer.precision": (
            "# Lightning precision, or auto: bf16-mixed where bfloat16 is native (AMX or AVX512-BF16 CPUs, where bf16",
            "# autocast is 2.8x faster than fp32; GPUs from Ampere on), else 32-true (emulated bf16 is several times "
            "slower)",
        ),
        "model.lora_targets": ("# adapted layers; not the output layer (lm_head), which PPO scoring applies itself",),
        "ppo.kl_coef": (
            "kl_coef: float = 0.0  # per-token KL penalty to the frozen reference; 0 skips the reference forward",
        ),
    }
    for key, lines_of_source in comments.items():
        assert all(line in source for line in lines_of_source)
        assert keys[key][1] == " ".join(line.split("# ", 1)[1] for line in lines_of_source)
    presets = next(line for line in lines if line.startswith("presets (configs/): ")).split(": ")[1].split()
    assert presets == sorted(path.stem for path in CONFIGS.glob("*.yaml"))


SCHEMA = """
@dataclass
class Part:
    \"\"\"A docstring.\"\"\"

    # two lines
    # above
    first: int = 1  # and one after
    second: str = "x"  # only after

    # a comment of the class: a blank line parts it from the field

    third: list[int] = field(
        default_factory=list
    )  # after a field of several lines
    fourth: bool = True
    # above, and nothing after
    fifth: float | None = None

    def method(self) -> None:
        value: int = 2  # not a field
"""


def test_schema_comments_are_the_lines_above_a_field_then_the_end_of_its_line():
    assert schema_comments(SCHEMA) == {
        "Part": {
            "first": "two lines above and one after",
            "second": "only after",
            "third": "after a field of several lines",
            "fourth": "",
            "fifth": "above, and nothing after",
        }
    }


def test_print_config_is_the_merged_config_and_loads_back_as_it(tmp_path, capsys):
    argv = [str(CONFIGS / "novelty.yaml"), "ppo.lr=2e-6", "trainer.loggers=[csv]"]
    assert main(["train", *argv, "--print-config"]) == 0
    printed = tmp_path / "printed.yaml"
    printed.write_text(capsys.readouterr().out)
    assert load_config([printed]) == named_by_changes(load_config(argv[:1], argv[1:]), argv[1:])
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


def test_progress_written_to_a_file_says_each_phase_its_end_and_a_heartbeat(monkeypatch):
    """Where stderr is no terminal (a log, a batch job) rich's bar shows nothing: a line per phase, at the end, and
    at least once a minute stand in for it; in a terminal, the bar alone."""
    import io

    from rich.console import Console

    from codeplay_lightning.commands import output

    now = [0.0]
    monkeypatch.setattr(output.time, "monotonic", lambda: now[0])
    written = io.StringIO()
    with output.LineProgress(console=Console(file=written, force_terminal=False)) as bar:
        phase = bar.add_task("the Setter writes 4 puzzles", total=None)
        bar.update(phase, description="the Solver attempts them, 2 times each")
        attempts = bar.add_task("solving", total=8)
        for done in range(1, 9):
            now[0] += 20.0  # a batch every 20 s: a line every third, and at the end
            bar.update(attempts, completed=done)
    assert written.getvalue().splitlines() == [
        "the Setter writes 4 puzzles",
        "the Solver attempts them, 2 times each",
        "solving: 0/8",
        "solving: 3/8",
        "solving: 6/8",
        "solving: 8/8",
    ]
    terminal = io.StringIO()
    with output.LineProgress(console=Console(file=terminal, force_terminal=True, width=80)) as bar:
        bar.update(bar.add_task("solving", total=2), completed=2)
    assert "solving: " not in terminal.getvalue()
