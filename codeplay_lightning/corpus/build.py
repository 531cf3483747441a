"""Building the corpus: draw instances from every family, verify each in the sandbox, deduplicate, split.

A drawn `f` gets P3's signature: its leading constants become default arguments (`signature.py`).

A pair is kept only when the reference `g` passes and every corruption of its answer fails: the
type's empty value (0, 0.0, "", []) and one perturbation (an int or float plus 1, a string with one
character more, a list with its last element dropped). A family whose `f` accepts those is too loose
to teach anything. An instance whose answer is a natural number or a text also gets its enumerating
solution (`enumeration.py`) as a second `sol_body` when that passes too. Splits: the families in
`HELDOUT_FAMILIES` are held out whole; of the others, every `HELDOUT_INSTANCE_EVERY`-th instance is held
out, so both kinds of generalisation can be measured.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from codeplay_lightning.corpus.enumeration import enumerating_solution
from codeplay_lightning.corpus.family import GRADES, Family
from codeplay_lightning.corpus.signature import constants_as_defaults
from codeplay_lightning.execution import Program, Sandbox
from codeplay_lightning.puzzles.parsing import answer_type
from codeplay_lightning.puzzles.puzzle import Puzzle

SPLITS = ("train", "heldout_instances", "heldout_families")
HELDOUT_INSTANCE_EVERY = 10
CORPUS_TIMEOUT = 2.0  # seconds per program while verifying: twice the judge's, so a slow reference is kept
DRAWS_PER_INSTANCE = 4  # a family's draw may repeat an earlier instance; it gets this many tries per slot

# Applied to the reference answer, inside the sandbox, after the reference g has run.
_CORRUPTIONS = {
    "int": ("0", "answer + 1"),
    "float": ("0.0", "answer + 1.0"),
    "str": ('""', 'answer + "q"'),
}
_LIST_CORRUPTIONS = ("[]", "answer[:-1]")


@dataclass(frozen=True)
class Instance:
    family: str
    topic: str
    grade: int
    f: str
    g: str
    ans_type: str
    split: str = "train"
    enumerating_g: str = ""  # a second solution, when a search over f's candidate answers reaches one in time

    def puzzle(self, name: str) -> Puzzle:
        return Puzzle(name=name, f=self.f, solutions=(self.g,), ans_type=self.ans_type)


def corruptions(g: str, ans_type: str) -> list[str]:
    """Sources of `g` variants whose answers must fail: each wraps the reference `g`."""
    expressions = _LIST_CORRUPTIONS if ans_type.startswith(("List[", "list[")) else _CORRUPTIONS[ans_type]
    return [
        f"{g}\n\n_reference = g\n\ndef g():\n    answer = _reference()\n    return {expression}\n"
        for expression in expressions
    ]


def draw(families: Sequence[Family], seed: int) -> Iterator[Instance]:
    """Distinct instances without end, round-robin over the families and grades, each from its own
    rng seeded by (seed, family, slot, attempt), in P3's signature: the same families and seed give the
    same instances. Unverified."""
    seen: set[str] = set()
    fruitless = 0  # slots in a row whose draws all repeated an earlier instance
    for slot in itertools.count():
        if fruitless == 10 * len(families):
            raise ValueError(f"the families ran out of new instances after {len(seen)}")
        family = families[slot % len(families)]
        grade = GRADES[(slot // len(families)) % len(GRADES)]
        for attempt in range(DRAWS_PER_INSTANCE):
            f, g = family.make(random.Random(f"{seed}/{family.name}/{slot}/{attempt}"), grade)
            f = constants_as_defaults(f)
            normalised = " ".join(f.split())
            if normalised not in seen:
                seen.add(normalised)
                ans_type = answer_type(Puzzle(family.name, f))
                if ans_type is None:
                    raise ValueError(f"family {family.name}: f's answer has no type annotation")
                yield Instance(family.name, family.topic, grade, f.rstrip(), g.rstrip(), ans_type)
                fruitless = 0
                break
        else:
            fruitless += 1


def verify(instances: Sequence[Instance], sandbox: Sandbox) -> list[bool]:
    """Per instance: its reference passes and every corruption fails."""
    programs, owners, wanted = [], [], []
    for index, instance in enumerate(instances):
        programs.append(Program(instance.f, instance.g, instance.ans_type))
        owners.append(index)
        wanted.append(True)
        for corrupted in corruptions(instance.g, instance.ans_type):
            programs.append(Program(instance.f, corrupted, instance.ans_type))
            owners.append(index)
            wanted.append(False)
    good = [True] * len(instances)
    for owner, should_pass, verdict in zip(owners, wanted, sandbox.verify(programs), strict=True):
        if verdict.passed != should_pass:
            good[owner] = False
    return good


def with_enumerations(instances: Sequence[Instance], sandbox: Sandbox) -> list[Instance]:
    """The instances, each with its enumerating solution when there is one and it passes."""
    candidates = [
        (index, g) for index, instance in enumerate(instances) if (g := enumerating_solution(instance.f)) is not None
    ]
    verdicts = sandbox.verify([Program(instances[index].f, g, instances[index].ans_type) for index, g in candidates])
    out = list(instances)
    for (index, g), verdict in zip(candidates, verdicts, strict=True):
        if verdict.passed:
            out[index] = dataclasses.replace(out[index], enumerating_g=g)
    return out


def split(instances: Sequence[Instance], heldout_families: set[str]) -> list[Instance]:
    """The instances with their split set (see the module docstring)."""
    out, per_family = [], Counter()
    for instance in instances:
        if instance.family in heldout_families:
            part = "heldout_families"
        else:
            per_family[instance.family] += 1
            part = "heldout_instances" if per_family[instance.family] % HELDOUT_INSTANCE_EVERY == 0 else "train"
        out.append(dataclasses.replace(instance, split=part))
    return out


def p3_entry(instance: Instance, index: int) -> dict:
    """The instance as a P3 `puzzles.json` entry (`sat`/`sol`), with its family, topic, grade and split."""
    header, _, body = instance.g.partition("\n")
    bodies = [body, instance.enumerating_g.partition("\n")[2]] if instance.enumerating_g else [body]
    return {
        "name": f"{instance.family}:{index}",
        "sat": "def sat" + instance.f.removeprefix("def f"),
        "ans_type": instance.ans_type,
        "sol_header": "def sol" + header.removeprefix("def g"),
        "sol_docstring": "",
        "sol_bodies": bodies,
        "family": instance.family,
        "topic": instance.topic,
        "grade": instance.grade,
        "split": instance.split,
    }


def build_corpus(
    families: Sequence[Family], heldout_families: set[str], n: int, seed: int, sandbox: Sandbox
) -> tuple[list[dict], Counter]:
    """`n` verified, distinct instances as P3 entries, and how many drawn instances each family lost to
    verification. Draws go on, in chunks, until `n` instances are verified."""
    kept: list[Instance] = []
    lost: Counter = Counter()
    instances = draw(families, seed)
    while len(kept) < n:
        chunk = list(itertools.islice(instances, n - len(kept)))
        for instance, good in zip(chunk, verify(chunk, sandbox), strict=True):
            if good:
                kept.append(instance)
            else:
                lost[instance.family] += 1
        if sum(lost.values()) > n:
            raise ValueError(f"more than {n} drawn instances failed verification; most: {lost.most_common(3)}")
    kept = with_enumerations(kept, sandbox)
    return [p3_entry(instance, index) for index, instance in enumerate(split(kept, heldout_families))], lost
