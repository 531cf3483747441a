"""The Ray judging backend on a local Ray cluster of 2 CPUs: the local sandbox's verdicts, in order, for a mixed
batch; actors killed mid-batch (once: the lost programs are judged again, as locally; again: a program lost twice is
a judge error, within a bounded time); its config keys."""

from __future__ import annotations

import threading
import time

import pytest
from sandbox_support import ORDINARY_PROGRAMS, REPO, program, wrong

from codeplay_lightning.config import ConfigError, SandboxConfig, load_config, run_identity
from codeplay_lightning.execution import JUDGE_ERROR, Call, Sandbox

ray = pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'codeplay_lightning[ray]'")
from codeplay_lightning.execution.ray_backend import RaySandbox  # noqa: E402

CONFIGS = REPO / "configs"
SETTINGS = {"workers": 2, "timeout": 1.0, "memory_mb": 256}
MIXED = [
    *ORDINARY_PROGRAMS,  # pass, fail, error
    program("def f(x: int):\n    return x > 0", "def g(:\n    return 1"),  # syntax
    wrong("def g():\n    while True:\n        pass"),  # timeout
    wrong("def g():\n    return [0] * (1 << 40)"),  # memory
    program("def f(x: List[int]) -> bool:\n    return x == [1, 2]", "def g():\n    print('two')\n    return [1, 2]"),
]
# a pass that takes a moment of wall time (a sleep, not the CPU clock): a batch of them is still judging when an
# actor is killed
SLOW = program("def f(x: int) -> bool:\n    return x == 7", "import time\ndef g():\n    time.sleep(0.3)\n    return 7")
BATCH_SECONDS = 120.0  # any batch here, lost actors and all, returns well within this


def judged(verdict):
    """What a verdict says of its program (the seconds it took aside)."""
    return verdict.status, verdict.detail, verdict.output, verdict.answer, verdict.returned, verdict.value


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def local():
    with Sandbox(**SETTINGS) as box:
        yield box


@pytest.fixture
def remote(cluster):
    with RaySandbox(**SETTINGS) as box:
        _ = box.isolation  # every actor up before the batch starts
        yield box


def test_the_same_verdicts_as_the_local_sandbox_in_input_order(local, remote):
    batch = MIXED * 3
    expected = [judged(verdict) for verdict in local.verify(batch)]
    landed = []
    verdicts = remote.verify(batch, on_verdict=lambda index, verdict: landed.append(index))
    assert [judged(verdict) for verdict in verdicts] == expected
    assert sorted(landed) == list(range(len(batch)))
    assert {status for status, *_ in expected} == {"pass", "fail", "error", "syntax", "timeout", "memory"}
    assert (remote.level, remote.isolation) == (local.level, local.isolation)
    calls = [Call("def double(x):\n    return 2 * x", "double", 21), Call("def f(x):\n    return x[9]", "f", [1])]
    assert [judged(verdict) for verdict in remote.apply(calls)] == [judged(verdict) for verdict in local.apply(calls)]


def verify_killing(box: RaySandbox, batch: list, rounds: int) -> tuple[list, list, float]:
    """`box.verify(batch)` while a thread, `rounds` times, waits until every actor is judging a chunk and kills them
    all: the verdicts, the actors' handles it killed, and the seconds the batch took."""
    killed, done = [], threading.Event()

    def busy_actors() -> list | None:
        actors = [actor for actor in box._actors if actor.handle not in killed]  # the replacements, after a round
        return actors if len(actors) == box.size and all(a.chunks and a.starting is None for a in actors) else None

    def kill() -> None:
        for _ in range(rounds):
            while (actors := busy_actors()) is None:
                if done.wait(0.05):
                    return
            time.sleep(0.2)  # into their first programs
            for actor in actors:
                ray.kill(actor.handle)
                killed.append(actor.handle)

    killer = threading.Thread(target=kill, daemon=True)
    killer.start()
    started = time.monotonic()
    verdicts = box.verify(batch)
    seconds = time.monotonic() - started
    done.set()
    killer.join(10.0)
    return verdicts, killed, seconds


def test_an_actor_killed_mid_batch_has_its_programs_judged_again(local, remote):
    batch = [SLOW, *MIXED] * 4
    expected = [judged(verdict) for verdict in local.verify(batch)]
    verdicts, killed, seconds = verify_killing(remote, batch, 1)
    assert len(killed) == 2 and seconds < BATCH_SECONDS
    assert not {actor.handle for actor in remote._actors} & set(killed)  # replaced
    assert [judged(verdict) for verdict in verdicts] == expected


def test_a_program_lost_twice_is_a_judge_error_and_the_rest_are_judged(local, remote):
    batch = [SLOW] * 24 + MIXED
    expected = [judged(verdict) for verdict in local.verify(batch)]
    verdicts, killed, seconds = verify_killing(remote, batch, 2)
    assert len(killed) == 4 and seconds < BATCH_SECONDS
    assert len(verdicts) == len(batch)
    errors = [verdict for verdict in verdicts if verdict.status == JUDGE_ERROR]
    # the first kill's programs go first to the replacements, so the second kill loses some of them again
    assert errors and all(verdict.judge_fault and "lost this program twice" in verdict.detail for verdict in errors)
    for verdict, wanted in zip(verdicts, expected):
        assert verdict.status == JUDGE_ERROR or judged(verdict) == wanted
    assert [judged(verdict) for verdict in remote.verify(MIXED)] == expected[-len(MIXED) :]  # whole again


@pytest.mark.parametrize(
    "override, message",
    [
        ({"backend": "slurm"}, "sandbox.backend must be local or ray, got 'slurm'"),
        ({"backend": "ray"}, "sandbox.backend=ray needs sandbox.workers as a number"),
    ],
)
def test_config_refuses_in_one_line(override, message):
    with pytest.raises(ConfigError, match=message) as error:
        SandboxConfig(**override)
    assert "\n" not in str(error.value)


def test_config_without_ray_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *args: None if name == "ray" else object())
    with pytest.raises(ConfigError, match=r"pip install 'codeplay_lightning\[ray\]'$"):
        SandboxConfig(backend="ray", workers=4)


def test_config_takes_the_ray_backend():
    config = load_config([CONFIGS / "smoke.yaml"], ["sandbox.backend=ray", "sandbox.workers=4"])
    assert (config.sandbox.backend, config.sandbox.workers, config.sandbox.ray_address) == ("ray", 4, "auto")
    assert "sandbox.backend" not in run_identity(config) and "sandbox.ray_address" not in run_identity(config)


def test_an_actor_that_cannot_start_is_one_line_at_start(cluster):
    with RaySandbox(workers=1, memory_mb=10) as box, pytest.raises(RuntimeError) as error:
        _ = box.isolation
    assert (
        str(error.value)
        == "a Ray judge failed to start: ValueError: memory_mb must be a whole number of at least 64, got 10"
    )
