"""The condition families: every instance's answer is the least number its f accepts, found by a naive
search here, and the corpus can always add the `for` loop form of that search."""

import itertools

import pytest

from codeplay_lightning.corpus import conditions
from codeplay_lightning.corpus.build import draw
from codeplay_lightning.corpus.enumeration import enumerating_solution
from codeplay_lightning.corpus.family import answer_of, defined


def least_accepted(accepts) -> int:
    n = 0
    while not accepts(n):
        n += 1
    return n


@pytest.mark.parametrize("family", conditions.FAMILIES, ids=lambda family: family.name)
def test_the_answer_is_the_least_accepted_number_and_the_next_one_fails(family):
    for instance in itertools.islice(draw([family], seed=11), 30):
        answer, accepts = answer_of(instance.g), defined(instance.f, "f")
        assert answer == least_accepted(accepts) > 0 and not accepts(answer + 1), instance.f
        assert answer_of(enumerating_solution(instance.f)) == answer
        assert instance.f.count(" and ") >= instance.grade  # grade + 1 conditions, some written with `and`


def test_the_list_or_text_is_lifted_into_the_signature_and_read_by_the_test():
    for family, name in zip(conditions.FAMILIES[1:], ("xs", "text"), strict=True):
        for instance in itertools.islice(draw([family], seed=3), 10):
            header, test = instance.f.splitlines()
            assert f", {name}=" in header, instance.f
            assert f"{name}[" in test or f" {name}" in test, instance.f
