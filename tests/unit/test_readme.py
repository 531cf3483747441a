"""The README's claims about targets, configs and layout hold: its make-target table is what `make help` prints,
every config it names exists and every config file is named, the preset and scale tables are what the files set,
its counts of presets are the sweep's, and its layout is the package's (litgpt's `test_readme` habit: the README is
checked, not trusted)."""

import re
import subprocess
from pathlib import Path

import pytest

from codeplay_lightning.cli import COMMANDS
from codeplay_lightning.config import TrainConfig, load_config
from codeplay_lightning.experiments.sweep import PRESETS
from tests.support import markdown_table

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()
CONFIGS = ROOT / "configs"
NUMBER_WORDS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}
WITHOUT_P3 = ["reward.reference=null", "reward.reference_split=null"]  # paper.yaml's P3 clone is not needed here


def section(title: str) -> str:
    """The text of the README's `## title` section, up to the next `## ` heading."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.M | re.S)
    assert match, f"the README has no section '## {title}'"
    return match.group(1)


def make_help_targets() -> list[str]:
    printed = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    targets = re.findall(r"^\s*make (\S+)", printed, re.M)
    assert targets, f"`make help` printed no targets:\n{printed}"
    return targets


def config_of(name: str):
    return load_config([CONFIGS / f"{name}.yaml"], WITHOUT_P3 if name == "paper" else [])


def test_the_target_table_is_what_make_help_prints_in_its_order():
    listed = [
        re.fullmatch(r"`make ([a-z-]+)`", row[0]).group(1) for row in markdown_table(section("Make targets"), "target")
    ]
    assert listed == make_help_targets()


def test_every_make_command_and_config_the_readme_uses_exists():
    targets = set(make_help_targets())
    used = set(re.findall(r"(?:^|`)make ([a-z][a-z-]*)\b", README, re.M))  # in code: `make x` or a line
    assert used and used <= targets, f"targets the README uses but the Makefile lacks: {used - targets}"
    chosen = set(re.findall(r"\bCONFIG=(\w+)", README))
    assert {"smoke"} <= chosen
    assert all((CONFIGS / f"{name}.yaml").is_file() for name in chosen), chosen


def test_the_ci_command_the_readme_quotes_is_the_ci_script():
    quoted = re.search(r"`\.ci/run` runs `(make [^`]+)`", README)
    assert quoted, "the README no longer says what CI runs"
    script = (ROOT / ".ci" / "run").read_text()
    assert re.search(rf"^{re.escape(quoted.group(1))}$", script, re.M)
    assert set(quoted.group(1).split()[1:]) <= set(make_help_targets())


def test_every_config_file_is_documented_and_every_config_named_exists():
    files = {path.stem for path in CONFIGS.glob("*.yaml")}
    named = set(re.findall(r"configs/(\w+)\.yaml", README))
    assert named <= files, f"configs the README names but configs/ lacks: {named - files}"
    training = section("Training the Setter")
    presets = [
        row[0].strip("`") for row in markdown_table(training, "preset") + markdown_table(training, "self-play preset")
    ]
    scales = [row[1].strip("`").removesuffix(".yaml") for row in markdown_table(training, "scale")]
    assert set(presets) | set(scales) == files | {"the defaults"}


def test_the_self_play_presets_differ_only_in_whether_the_solver_learns():
    (learning, learns), (fixed, stays) = markdown_table(section("Training the Setter"), "self-play preset")
    a, b = config_of(learning.strip("`")), config_of(fixed.strip("`"))
    assert (
        learns.startswith("learns")
        and a.selfplay.learn_every == 2
        and stays.startswith("fixed")
        and not b.selfplay.learns
    )
    assert (a.reward, a.trainer.iterations, a.rollout) == (b.reward, b.trainer.iterations, b.rollout)
    assert (a.reward.w_difficulty, a.reward.w_novelty, a.trainer.iterations) == (1, 1, 16)


def test_the_preset_table_is_the_sweeps_presets_with_the_weights_their_files_set():
    rows = markdown_table(section("Training the Setter"), "preset")
    assert [name.strip("`") for name, _ in rows] == PRESETS
    for name, reward in rows:
        config = config_of(name.strip("`")).reward
        weights = re.fullmatch(r"w_d = ([\d.]+), w_n = ([\d.]+)", reward)
        if weights:
            assert (config.combine, config.w_difficulty, config.w_novelty) == ("sum", *map(float, weights.groups()))
        else:
            assert (reward, config.combine) == ("R = R_d·R_n", "product"), name


def test_the_scale_table_is_what_the_config_files_set():
    rows = markdown_table(section("Training the Setter"), "scale")
    assert len(rows) == 3
    for _, file, streams_steps, iterations, fewshot, attempts, model in rows:
        config = TrainConfig() if file == "the defaults" else config_of(file.strip("`").removesuffix(".yaml"))
        streams, steps = (int(number) for number in streams_steps.split(" × "))
        assert (config.rollout.n_envs, config.rollout.n_steps) == (streams, steps), file
        assert config.trainer.iterations == int(iterations), file
        assert config.rollout.fewshot == int(fewshot), file
        assert config.solver.attempts == int(attempts), file
        assert config.model.name == model.strip("`"), file


@pytest.mark.parametrize("pattern", [r"\bthe (\w+) presets\b", r"\b[Tt]he paper's (\w+) presets\b"])
def test_every_count_of_the_presets_is_the_sweeps(pattern):
    counts = [NUMBER_WORDS[word] for word in re.findall(pattern, README) if word in NUMBER_WORDS]
    assert counts and set(counts) == {len(PRESETS)}, counts


def layout() -> dict[str, str]:
    """The Layout block's entries, `codeplay_lightning/`'s indented under it: name -> its description, the
    continuation lines included."""
    block = re.search(r"```\n(codeplay_lightning/.*?)```", section("Layout"), re.S).group(1)
    entries: dict[str, str] = {}
    name = None
    for line in block.splitlines()[1:]:
        first = re.match(r"(\s*)((?:[\w.]+/?\s)+)\s+(.*)", line)
        if first and not line.startswith(" " * 6):
            names, name = first.group(2).split(), None
            for each in names:
                name = ("codeplay_lightning/" if first.group(1) else "") + each
                entries[name] = first.group(3)
        elif name is not None:
            entries[name] += " " + line.strip()
    return entries


def test_the_layout_is_every_folder_and_top_level_module_of_the_package():
    package = ROOT / "codeplay_lightning"
    rooms = {f"codeplay_lightning/{path.name}/" for path in package.iterdir() if (path / "__init__.py").is_file()}
    rooms |= {f"codeplay_lightning/{path.name}" for path in package.glob("*.py") if path.name != "__init__.py"}
    listed = {name for name in layout() if name.startswith("codeplay_lightning/")}
    assert listed == rooms, f"missing: {rooms - listed}; not in the package: {listed - rooms}"
    top = {name for name in layout() if not name.startswith("codeplay_lightning/")}
    assert top and all((ROOT / name).is_dir() for name in top), top


def test_the_layout_names_every_codeplay_command():
    commands = layout()["codeplay_lightning/commands/"]
    assert all(re.search(rf"\b{re.escape(name)}\b", commands) for name in COMMANDS), commands
