"""Every corpus family, at every grade, writes puzzles that the sandbox confirms: the reference g
passes, the corrupted answers fail, and different seeds give different puzzles."""

import itertools

import pytest

from codeplay_lightning.corpus import FAMILIES
from codeplay_lightning.corpus.build import draw, verify
from codeplay_lightning.corpus.family import GRADES, TOPICS
from codeplay_lightning.execution import Sandbox
from codeplay_lightning.puzzles.parsing import check_puzzle

DRAWS = 3 * len(GRADES)  # each family: 3 instances per grade


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2, timeout=2.0) as sandbox:
        yield sandbox


@pytest.mark.parametrize("family", FAMILIES, ids=lambda family: family.name)
def test_family_instances_verify(family, sandbox):
    instances = list(itertools.islice(draw([family], seed=7), DRAWS))
    assert len({instance.f for instance in instances}) == DRAWS
    assert {instance.grade for instance in instances} == set(GRADES)
    for instance in instances:
        assert check_puzzle(instance.f).valid, check_puzzle(instance.f).reason
    results = verify(instances, sandbox)
    failing = [instance for instance, good in zip(instances, results) if not good]
    assert not failing, f"{family.name}: reference fails or a corruption passes for\n{failing[0].f}\n{failing[0].g}"


def test_family_names_are_unique_and_topics_known():
    names = [family.name for family in FAMILIES]
    assert len(names) == len(set(names))
    assert {family.topic for family in FAMILIES} <= set(TOPICS)
