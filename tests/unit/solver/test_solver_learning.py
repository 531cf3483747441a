"""The learning Solver of self-play (`solver.learning`): the BC data (only the judge's passes, in the exact text
the Solver samples), the BC loss against a full forward per sequence, LoRA on a weight-sharing copy of the
initial model, the replay buffer, and sharded learning against single-process learning.

The exactness tests run in float64 (the tiny Llama cast with `.double()`, its norms too: `float64_norms`), so the
paths that sum the same terms in other orders (the shared prefix run once, the gradients of two ranks summed) agree
to about 1e-12."""

from __future__ import annotations

import copy
import functools
import io
import json
import threading
from collections import Counter
from dataclasses import replace

import pytest
import torch
from support import NEGATIVE_ROOT, SEVEN, ScriptedLLM
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from codeplay_lightning.config import SelfPlayConfig, SolverConfig
from codeplay_lightning.execution.warden.answers import encode_answer
from codeplay_lightning.execution.warden.protocol import pack
from codeplay_lightning.puzzles import Puzzle, fewshot_puzzles, solver_prompt
from codeplay_lightning.solver import FewShotSolver, learning
from codeplay_lightning.solver.learning import (
    ReplayBuffer,
    SolverLearner,
    bc_groups,
    bc_loss,
    bc_sequences,
    plain_solution,
    scored_slots,
    sharing_copy,
    verified_pairs,
)

EXAMPLES = fewshot_puzzles()[:2]
OTHERS = fewshot_puzzles()[2:]  # puzzles with a solution each, none of them a few-shot example
CORPUS = fewshot_puzzles()[10:14]
SEVEN_TWO_LINES = replace(SEVEN, solutions=("def g():\n    x = 3\n    return x + 4\n\n",))  # trailing blank lines
SEVEN_ONE_LINE = replace(SEVEN, solutions=("def g():\n    return 7",))
PAIR_SETS = {  # solutions of different lengths each
    "distinct puzzles": [OTHERS[0], OTHERS[1], SEVEN_TWO_LINES, OTHERS[4]],
    # the sequences share the prompt and "\n    return " after it: the shared prefix must stop at the prompt
    "one puzzle, two solutions": [SEVEN_ONE_LINE, SEVEN_TWO_LINES],
    "one pair": [OTHERS[1]],
}


@pytest.fixture
def float64_norms(monkeypatch):
    """Llama's RMSNorm computes in float32 whatever its input's dtype: in a float64 model every norm then rounds to
    float32, and gradients summed in another order differ by 1e-7 of their size (measured: an upstream gradient
    v1 + v2 gave 9e-7 more than v1 and v2 apart). Here it computes in its input's dtype, float32 at least: the
    same as before for float32."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        states = hidden_states.to(torch.promote_types(hidden_states.dtype, torch.float32))
        states = states * torch.rsqrt(states.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * states.to(hidden_states.dtype)

    monkeypatch.setattr(LlamaRMSNorm, "forward", forward)


def new_learner(initial, tokenizer, corpus=(), autocast=None, **settings) -> SolverLearner:
    config = SelfPlayConfig(learn_every=1, lora_rank=2, **settings)
    return SolverLearner(
        initial=initial, tokenizer=tokenizer, examples=EXAMPLES, config=config, corpus=corpus, seed=0, autocast=autocast
    )


def perturb_lora_b(model, seed: int) -> None:
    """B away from 0, so that the adapters change the logits and A gets gradients."""
    generator = torch.Generator().manual_seed(seed)
    lora_b = [parameter for name, parameter in model.named_parameters() if "lora_B" in name]
    assert lora_b
    with torch.no_grad():
        for parameter in lora_b:
            parameter.copy_(0.3 * torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype))


def naive_bc_loss(model, sequences) -> tuple[torch.Tensor, int]:
    """One unpadded full forward per sequence; the sum of -log p of every token after its prompt."""
    total, count = torch.zeros((), dtype=torch.float64), 0
    for ids, prompt_length in sequences:
        logprobs = torch.log_softmax(model(input_ids=torch.tensor(ids)[None]).logits[0], dim=-1)  # (L, V)
        targets = torch.tensor(ids[prompt_length:])  # predicted by the states at prompt_length - 1 .. L - 2
        total = total - logprobs[prompt_length - 1 : -1].gather(-1, targets[:, None]).sum()
        count += len(targets)
    return total, count


def logits_of(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids[None]).logits[0]


# ---------------------------------------------------------------- the BC data


@pytest.mark.parametrize("pairs", PAIR_SETS.values(), ids=PAIR_SETS.keys())
def test_bc_sequences_are_the_solver_prompt_then_the_solution_body_and_its_closing(char_tokenizer, pairs):
    sequences = bc_sequences(char_tokenizer, EXAMPLES, pairs)
    assert len(sequences) == len(pairs)
    for pair, (ids, prompt_length) in zip(pairs, sequences):
        assert ids[:prompt_length] == char_tokenizer(solver_prompt(EXAMPLES, pair))["input_ids"]
        body = pair.solutions[0].rstrip().removeprefix("def g():")
        assert char_tokenizer.decode(ids[prompt_length:]) == body + "\n\nassert f(g())"
        # the text is exactly how the pair would read as one more few-shot example
        assert solver_prompt([*EXAMPLES, pair], NEGATIVE_ROOT).startswith(char_tokenizer.decode(ids))


@pytest.mark.parametrize(
    "solution", ["    return 7", "def h():\n    return 7", "lambda: 7", "\ndef g():\n    return 7"]
)
def test_bc_sequences_refuse_a_solution_that_does_not_start_with_def_g(char_tokenizer, solution):
    with pytest.raises(ValueError, match="def g"):
        bc_sequences(char_tokenizer, EXAMPLES, [OTHERS[0], replace(SEVEN, solutions=(solution,))])


@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("pairs", PAIR_SETS.values(), ids=PAIR_SETS.keys())
def test_bc_loss_and_its_adapter_gradients_equal_a_full_forward_per_sequence(
    tiny_llama, char_tokenizer, float64_norms, pairs, recompute
):
    """The shared few-shot prefix runs once and the rests behind it (`score_actions`): the same sum of -log p
    over the tokens after each prompt, and the same gradient on every adapter, as one forward per sequence; also
    with the rests' activations recomputed in the backward."""
    learner = new_learner(copy.deepcopy(tiny_llama).double(), char_tokenizer)
    model = learner.model
    perturb_lora_b(model, seed=1)
    adapters = learner.adapters()
    sequences = bc_sequences(char_tokenizer, EXAMPLES, pairs)

    loss, count = bc_loss(model, sequences, torch.device("cpu"), recompute)
    gradients = torch.autograd.grad(loss, adapters)
    expected_loss, expected_count = naive_bc_loss(model, sequences)
    expected_gradients = torch.autograd.grad(expected_loss, adapters)

    assert loss.dtype == torch.float64
    assert count == expected_count == sum(len(ids) - prompt_length for ids, prompt_length in sequences)
    torch.testing.assert_close(loss, expected_loss, rtol=1e-12, atol=0)
    for gradient, expected in zip(gradients, expected_gradients, strict=True):
        assert expected.abs().max() > 0  # every adapter matters to the loss
        torch.testing.assert_close(gradient, expected, rtol=1e-9, atol=1e-11 * float(expected.abs().max()))


# ---------------------------------------------------------------- LoRA on the shared weights


def test_sharing_copy_shares_the_parameters_but_copies_the_modules(tiny_llama):
    initial = copy.deepcopy(tiny_llama)
    shared = sharing_copy(initial)
    assert shared is not initial
    pairs = list(zip(shared.named_parameters(), initial.named_parameters(), strict=True))
    assert pairs and all(mine is theirs for (_, mine), (_, theirs) in pairs)
    assert shared.model.layers[0] is not initial.model.layers[0]  # the modules are copies
    assert shared.config is not initial.config
    assert shared.model.rotary_emb.inv_freq is not initial.model.rotary_emb.inv_freq  # buffers are copied too


def test_the_learner_adds_adapters_to_the_initial_weights_without_changing_them(tiny_llama, char_tokenizer):
    """The initial model is the initial Solver and the Setter's reference: the learner holds no copy of its
    weights, leaves its modules as they were, starts from its logits (B = 0) and trains only the adapters."""
    initial = copy.deepcopy(tiny_llama)
    module_types = [(name, type(module)) for name, module in initial.named_modules()]
    initial_parameters = list(initial.parameters())
    learner = new_learner(initial, char_tokenizer, bc_lr=1e-3)

    assert [(name, type(module)) for name, module in initial.named_modules()] == module_types
    assert any("lora" in type(module).__module__ for module in learner.model.modules())
    adapters = {id(parameter) for parameter in learner.adapters()}
    assert adapters and all(parameter.requires_grad for parameter in learner.adapters())
    base = [parameter for parameter in learner.model.parameters() if id(parameter) not in adapters]
    assert {id(parameter) for parameter in base} == {id(parameter) for parameter in initial_parameters}
    assert {p.data_ptr() for p in base} == {p.data_ptr() for p in initial_parameters}
    assert len(base) == len(initial_parameters)

    ids = torch.tensor(char_tokenizer(solver_prompt(EXAMPLES, SEVEN))["input_ids"])
    before = logits_of(initial, ids)
    assert torch.equal(logits_of(learner.model, ids), before)

    weights = {name: tensor.clone() for name, tensor in initial.state_dict().items()}
    assert learner.replay.add(PAIR_SETS["distinct puzzles"]) == 4
    record = learner.learn(lambda tensor: tensor, rank=0, world_size=1)
    assert record["steps"] >= 1 and record["new_pairs"] == 4

    assert initial.state_dict().keys() == weights.keys()
    assert all(torch.equal(initial.state_dict()[name], tensor) for name, tensor in weights.items())
    assert torch.equal(logits_of(initial, ids), before)
    assert not torch.equal(logits_of(learner.model, ids), before)
    with learner.model.disable_adapter():  # the learner's base is still the initial weights
        assert torch.equal(logits_of(learner.model, ids), before)


# ---------------------------------------------------------------- the replay buffer


def numbered(prefix: str, count: int) -> list[Puzzle]:
    """`count` pairs, each of its own puzzle (the prefix is in f, so two prefixes never share a puzzle)."""
    return [
        Puzzle(
            f"{prefix}{i}", f"def f(x: int):\n    return x == {i}  # {prefix}", (f"def g():\n    return {i}",), "int"
        )
        for i in range(count)
    ]


def test_the_buffer_drops_repeats_up_to_whitespace_and_caps_each_puzzle():
    buffer = ReplayBuffer(solutions_per_puzzle=2, seed=0)
    seven = replace(SEVEN, solutions=("def g():\n    return 7",))
    seven_spaced = Puzzle("seven again", "def f(x: int):\n  return  x == 7\n", ("def g():\n\treturn   7\n",), "int")
    seven_other = replace(SEVEN, solutions=("def g():\n    return 3 + 4",))
    seven_third = SEVEN_TWO_LINES
    seven_third_spaced_f = replace(
        seven_third, f="def f(x: int):\n\n    return x == 7", solutions=("def g(): return 7.0",)
    )
    root = replace(NEGATIVE_ROOT, solutions=("def g():\n    return -12",))

    assert buffer.add([seven, seven_spaced, seven]) == 1  # the same pair, whatever the whitespace
    assert buffer.add([seven_other, seven_third, seven_third_spaced_f, root, seven_other]) == 2
    assert buffer.pairs == [seven, seven_other, root]  # SEVEN's third solution is over the cap of 2
    assert buffer.new == 3
    assert buffer.add([seven_third, root]) == 0


@pytest.mark.parametrize(
    "n_old, n_new, n_corpus, replay_ratio, corpus_ratio, replayed, from_corpus",
    [
        (0, 4, 10, 1.0, 0.5, 0, 2),  # nothing older yet
        (6, 4, 10, 1.0, 0.5, 4, 2),
        (6, 4, 3, 2.0, 1.0, 6, 3),  # fewer older and corpus pairs than the ratios ask for: all of them
        (6, 3, 10, 0.4, 0.3, 1, 1),  # 1.2 and 0.9, rounded
        (5, 2, 10, 0.0, 0.0, 0, 0),
        (6, 0, 10, 1.0, 1.0, 0, 0),  # no new pair: an empty phase
    ],
)
def test_a_phase_is_every_new_pair_and_a_ratio_of_older_and_corpus_ones(
    n_old, n_new, n_corpus, replay_ratio, corpus_ratio, replayed, from_corpus
):
    older, fresh, corpus = numbered("old", n_old), numbered("new", n_new), numbered("corpus", n_corpus)
    buffer = ReplayBuffer(solutions_per_puzzle=2, seed=0)
    buffer.add(older)
    buffer.phase([], 0.0, 0.0)  # the older pairs are trained on: no longer new
    assert buffer.new == 0
    buffer.add(fresh)

    data = buffer.phase(corpus, replay_ratio, corpus_ratio)

    assert (data.new, data.replayed, data.from_corpus) == (n_new, replayed, from_corpus)
    assert len(data.pairs) == n_new + replayed + from_corpus
    drawn = Counter(data.pairs)
    assert max(drawn.values(), default=1) == 1  # drawn without replacement
    assert all(pair in drawn for pair in fresh)
    assert sum(pair in drawn for pair in older) == replayed
    assert sum(pair in drawn for pair in corpus) == from_corpus
    assert buffer.new == 0
    empty = buffer.phase(corpus, replay_ratio, corpus_ratio)  # nothing new since: nothing to train on
    assert (empty.pairs, empty.new, empty.replayed, empty.from_corpus) == ([], 0, 0, 0)

    later = numbered("later", 2)
    buffer.add(later)
    data = buffer.phase([], 10.0, 0.0)  # replays every older pair: the new ones of the last phase too
    assert data.new == 2 and data.replayed == n_old + n_new
    assert Counter(data.pairs) == Counter(older + fresh + later)


def test_phases_are_a_function_of_the_seed():
    def phases(seed: int) -> list:
        buffer = ReplayBuffer(solutions_per_puzzle=2, seed=seed)
        drawn = []
        for prefix in ("a", "b", "c"):
            buffer.add(numbered(prefix, 8))
            drawn.append(buffer.phase(numbered("corpus", 20), 0.5, 0.5))
        return drawn

    assert phases(7) == phases(7)
    assert phases(7) != phases(8)


def torch_round_trip(state: dict) -> dict:
    stream = io.BytesIO()
    torch.save(state, stream)
    stream.seek(0)
    return torch.load(stream, weights_only=False)


TRANSPORTS = {
    "in memory": lambda state: state,
    "torch.save": torch_round_trip,
    "json": lambda state: json.loads(json.dumps(state)),  # tuples come back as lists
}


@pytest.mark.parametrize("transport", TRANSPORTS.values(), ids=TRANSPORTS.keys())
def test_a_restored_buffer_goes_on_as_the_original(transport):
    """A checkpoint's buffer: the same pairs, the same new ones, the same repeats and caps, the same draws."""
    original = ReplayBuffer(solutions_per_puzzle=2, seed=5)
    original.add(numbered("a", 6))
    original.phase(numbered("corpus", 10), 1.0, 0.5)
    original.add([*numbered("b", 3), *numbered("a", 2)])  # two repeats

    restored = ReplayBuffer(solutions_per_puzzle=2, seed=99)
    restored.load_state_dict(transport(original.state_dict()))

    assert restored.pairs == original.pairs and restored.new == original.new == 3
    assert restored.phase(numbered("corpus", 10), 1.0, 0.5) == original.phase(numbered("corpus", 10), 1.0, 0.5)
    more = [
        *numbered("a", 1),  # a repeat from before the checkpoint
        replace(numbered("a", 2)[1], solutions=("def g():\n    return 1 + 0",)),  # a second solution of a1
        replace(numbered("a", 2)[1], solutions=("def g():\n    return 2 - 1",)),  # a third: over the cap
        *numbered("c", 4),
    ]
    assert restored.add(more) == original.add(more) == 5
    assert restored.phase(numbered("corpus", 10), 1.5, 1.0) == original.phase(numbered("corpus", 10), 1.5, 1.0)


# ---------------------------------------------------------------- sharded learning


PHASES = [OTHERS[:5], [SEVEN_TWO_LINES, OTHERS[6]]]
SHARDED = {"bc_batch_size": 3, "bc_epochs": 2, "bc_lr": 1e-2, "replay_ratio": 1.0, "corpus_ratio": 0.4}


def learn_phases(learner: SolverLearner, sum_over_ranks, rank: int, world_size: int) -> list[dict]:
    records = []
    for pairs in PHASES:
        learner.replay.add(pairs)
        records.append(learner.learn(sum_over_ranks, rank, world_size))
    return records


def learn_in_threads(learners: list[SolverLearner]) -> list[list[dict]]:
    """Each learner as one rank, in a thread of its own; `sum_over_ranks` is an all-reduce between the
    threads that adds the ranks' tensors in rank order, so every rank gets the very same sum."""
    world_size = len(learners)
    barrier = threading.Barrier(world_size, timeout=120)
    slots: list[torch.Tensor | None] = [None] * world_size
    outcomes: list = [None] * world_size

    def sum_over_ranks(rank: int):
        def reduce(tensor: torch.Tensor) -> torch.Tensor:
            slots[rank] = tensor.detach().clone()
            barrier.wait()
            total = functools.reduce(torch.add, slots)
            barrier.wait()  # no rank writes its next tensor before every rank has read this one
            return total

        return reduce

    def work(rank: int) -> None:
        try:
            outcomes[rank] = learn_phases(learners[rank], sum_over_ranks(rank), rank, world_size)
        except BaseException as error:  # noqa: BLE001 - re-raised below, after the other rank is released
            outcomes[rank] = error
            barrier.abort()

    threads = [threading.Thread(target=work, args=(rank,)) for rank in range(world_size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return outcomes


def test_learning_on_two_ranks_equals_learning_on_one(tiny_llama, char_tokenizer, float64_norms):
    """Phase 1 is 5 new pairs and 2 corpus ones (0.4 × 5) in batches of 3, the last of one sequence (rank 1 scores
    nothing in it); phase 2 is 2 new, 2 replayed and 1 corpus pair (0.4 × 2, rounded); two epochs each. Both ranks
    must step exactly alike, and as one process that scores every batch whole."""
    initial = copy.deepcopy(tiny_llama).double()  # under all three learners, each with adapters of its own
    single = new_learner(initial, char_tokenizer, corpus=CORPUS, **SHARDED)
    ranks = [new_learner(initial, char_tokenizer, corpus=CORPUS, **SHARDED) for _ in range(2)]
    start = [parameter.clone() for parameter in single.adapters()]

    expected = learn_phases(single, lambda tensor: tensor, rank=0, world_size=1)
    records = learn_in_threads(ranks)

    counts = [{key: record[key] for key in ("new_pairs", "replayed", "from_corpus", "steps")} for record in expected]
    assert counts == [
        {"new_pairs": 5, "replayed": 0, "from_corpus": 2, "steps": 6},
        {"new_pairs": 2, "replayed": 2, "from_corpus": 1, "steps": 4},
    ]
    assert records[0] == records[1]
    for record, reference in zip(records[0], expected, strict=True):
        assert record.keys() == reference.keys()
        for key, value in reference.items():
            assert record[key] == pytest.approx(value, rel=1e-6)  # losses are reported in float32
    moved = 0
    for mine, other, reference, before in zip(ranks[0].adapters(), ranks[1].adapters(), single.adapters(), start):
        assert torch.equal(mine, other)
        torch.testing.assert_close(mine, reference, rtol=1e-9, atol=1e-12)
        moved += not torch.equal(reference, before)
    assert moved == len(start)  # every adapter learned


@pytest.mark.parametrize("packed", [True, False])
def test_bc_groups_keep_each_forward_within_its_slots_and_a_long_sequence_alone(packed):
    """Every sequence once, longest first; each group within the slots unless it is one sequence; one long
    sequence no longer pads the packs of the short ones."""
    prefix = list(range(50))
    lengths = [30, 400, 12, 90, 90, 250, 7, 60, 130, 45]
    sequences = [(prefix + [1000 + i] * length, len(prefix) + 3) for i, length in enumerate(lengths)]
    groups = bc_groups(sequences, 300, packed)

    grouped = [sequence for group in groups for sequence in group]
    assert sorted(map(id, grouped)) == sorted(map(id, sequences))
    assert [len(ids) for ids, _ in grouped] == sorted((len(ids) for ids, _ in sequences), reverse=True)
    for group in groups:
        fed = [len(ids) - len(prefix) - 1 for ids, _ in group]
        assert len(group) == 1 or scored_slots(fed, len(prefix), packed) <= 300
    assert len(groups[0]) == 1 and len(groups[0][0][0]) == len(prefix) + 400
    assert len(bc_groups(sequences, 10**6, packed)) == 1


def test_a_step_in_groups_is_the_step_whole(tiny_llama, char_tokenizer, float64_norms, monkeypatch):
    """A step scored one sequence per forward (BC_SLOTS = 1), its gradients summed over the forwards, gives the
    same losses and adapters as the step scored whole."""
    initial = copy.deepcopy(tiny_llama).double()
    whole, grouped = (new_learner(initial, char_tokenizer, corpus=CORPUS, **SHARDED) for _ in range(2))
    expected = learn_phases(whole, lambda tensor: tensor, rank=0, world_size=1)
    forwards = []
    monkeypatch.setattr(learning, "BC_SLOTS", 1)
    monkeypatch.setattr(learning, "bc_loss", lambda *args: forwards.append(len(args[1])) or bc_loss(*args))
    records = learn_phases(grouped, lambda tensor: tensor, rank=0, world_size=1)

    assert forwards and set(forwards) == {1}
    for record, reference in zip(records, expected, strict=True):
        assert record == pytest.approx(reference, rel=1e-9)
    for mine, reference in zip(grouped.adapters(), whole.adapters(), strict=True):
        torch.testing.assert_close(mine, reference, rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------- what enters the BC data


HONEST = "\n    return 7"
WRONG = "\n    return 8"
HOSTILE = {  # continuations of `def g():` for SEVEN, f(x) = x == 7
    "exit": "\n    raise SystemExit(0)",
    "os._exit": "\n    import os\n    os._exit(0)",
    "f replaced by frame": "\n    import sys\n    sys._getframe(1).f_globals['f'] = lambda *args: True\n    return 0",
    "f replaced by inspect": (
        "\n    import inspect\n    for frame in inspect.stack():\n"
        "        frame.frame.f_globals['f'] = lambda *args: True\n    return 0"
    ),
    "always equal": (
        "\n    class Anything:\n        def __eq__(self, other):\n            return True\n    return Anything()"
    ),
    "always equal int": (
        "\n    class Seven(int):\n        def __eq__(self, other):\n            return True\n"
        "        __hash__ = int.__hash__\n    return Seven(0)"
    ),
    "builtins": (
        "\n    import builtins\n    builtins.isinstance = lambda *args: True\n    builtins.type = lambda *args: int\n"
        "    builtins.bool = lambda *args: True\n    return '7'"
    ),
    "printed verdict": '\n    print(\'pass\')\n    print(\'{"status": "pass", "passed": true}\')\n    return 0',
    "keyboard interrupt": "\n    raise KeyboardInterrupt",
    "infinite loop": "\n    while True:\n        pass",
    "a float f accepts": "\n    return 7.0",  # f(7.0) is True, but the answer must be an int
}


def test_only_a_judged_pass_enters_the_bc_data(sandbox):
    """A real few-shot Solver whose LLM answers SEVEN with attempts at cheating the judge and one honest g: the
    honest one is the only pair."""
    continuations = [*HOSTILE.values(), HONEST]
    config = SolverConfig(attempts=len(continuations), batch_size=len(continuations))
    solver = FewShotSolver(ScriptedLLM(continuations), sandbox, EXAMPLES, config)

    results = solver.solve([SEVEN])

    statuses = dict(zip([*HOSTILE, "honest"], [verdict.status for verdict in results[0].verdicts], strict=True))
    assert statuses["honest"] == "pass"
    assert all(status not in ("pass", "syntax") for name, status in statuses.items() if name != "honest"), statuses
    assert verified_pairs(results) == [replace(SEVEN, solutions=("def g():" + HONEST,))]


def forged_reply(answer: int) -> str:
    """A g that writes its runner's reply itself (the frame a runner sends for `answer`, on the reply descriptor
    the runner inherits), then leaves before anything else can be sent: g never returns."""
    frame = pack("answer", encode_answer(answer, "int"), repr(answer), "", "")
    return f"\n    import os\n    os.write(4, {frame!r})\n    os._exit(0)"


def test_a_forged_reply_passes_the_judge_but_not_into_the_bc_data(sandbox):
    """The judge checks f on whatever answer g's process reports, so a g that forges the report with the right
    answer passes; it never returns that answer in plain Python, and `plain_solution` keeps it out."""
    config = SolverConfig(attempts=3, batch_size=3)
    solver = FewShotSolver(ScriptedLLM([forged_reply(7), HONEST, WRONG]), sandbox, EXAMPLES, config)

    (result,) = solver.solve([SEVEN])

    assert [verdict.passed for verdict in result.verdicts] == [True, True, False]
    assert verified_pairs([result]) == [replace(SEVEN, solutions=("def g():" + HONEST,))]


def test_a_puzzle_every_attempt_passed_gives_no_bc_pair(sandbox):
    """BC learns from the puzzles the Solver passed at some attempts only: one it passed every time it already
    solves. The same two passing programs enter when a third attempt fails."""
    passing = [HONEST, "\n    return 3 + 4"]

    def pairs(continuations: list[str]) -> list[Puzzle]:
        config = SolverConfig(attempts=len(continuations), batch_size=len(continuations))
        return verified_pairs(FewShotSolver(ScriptedLLM(continuations), sandbox, EXAMPLES, config).solve([SEVEN]))

    assert pairs(passing) == []
    assert pairs([*passing, WRONG]) == [replace(SEVEN, solutions=("def g():" + g,)) for g in passing]


@pytest.mark.parametrize(
    "g, plain",
    [
        ("def g():\n    return 7", True),
        ("import math\nimport itertools as it\nfrom collections import Counter\ndef g():\n    return 7", True),
        ("def g():\n    from functools import reduce\n    return reduce(int.__add__, [3, 4])", False),  # a dunder
        ("def g():\n    import os\n    return 7", False),
        ("def g():\n    from sys import exit\n    return 7", False),
        ("def g():\n    return eval('3 + 4')", False),
        ("def g():\n    return open('/proc/self/fd/4', 'w')", False),
        ("def g():\n    return (7).__class__(7)", False),
        ("def g():\n    return __import__('os').getpid()", False),
        ("def g(:\n    return 7", False),  # never passes anyway
        (
            "import typing\ndef g():\n    typing.sys.modules['os'].write(4, b'')\n    return 7",
            False,
        ),  # a module's module
        ("import re\ndef g():\n    return re._compiler and 7", False),  # a private attribute
        ("import functools\ndef g():\n    return getattr(functools, 'sys') and 7", False),  # by name
        ("def g():\n    return (x for x in ()).gi_frame.f_globals['__builtins__'] and 7", False),  # into frames
        ("from typing import sys\ndef g():\n    return 7", False),  # a module imported from a module
        ("import collections\ndef g():\n    return collections.Counter('aab')['a'] + 5", True),
        ("from collections.abc import Sequence\ndef g():\n    return 7 if isinstance([], Sequence) else 0", True),
        # a module held under another name, passed, returned or kept: never provably plain
        ("import typing\ndef g():\n    t = typing\n    t.sys.modules['os'].write(4, b'')\n    return 7", False),
        ("import typing\ndef g():\n    return (lambda m: m.sys)(typing) and 7", False),
        ("import typing\ndef g():\n    return [typing][0].sys and 7", False),
        ("import math\ndef g():\n    math = 7\n    return math", False),
        ("import math\ndef g():\n    return int(math.sqrt(49))", True),
    ],
)
def test_plain_solutions_by_hand(g, plain):
    assert plain_solution(g) is plain


def test_the_sampler_is_the_learner_with_its_adapters_merged(tiny_llama, char_tokenizer, float64_norms):
    """The Solver samples from a plain copy the adapters are merged into after every phase (and on loading a
    checkpoint): its logits are the learner's (in float64: W x + B A x against (W + B A) x), and the initial
    weights stay as they were."""
    initial = copy.deepcopy(tiny_llama).double()
    learner = new_learner(initial, char_tokenizer, bc_lr=1e-2)
    ids = torch.tensor(char_tokenizer(solver_prompt(EXAMPLES, SEVEN))["input_ids"])
    assert torch.equal(logits_of(learner.sampler, ids), logits_of(initial, ids))  # B = 0
    learner.replay.add(PAIR_SETS["distinct puzzles"])
    learner.learn(lambda tensor: tensor, rank=0, world_size=1)

    learned = logits_of(learner.model, ids)
    assert not torch.allclose(learned, logits_of(initial, ids), atol=1e-3)
    torch.testing.assert_close(logits_of(learner.sampler, ids), learned, rtol=1e-10, atol=1e-10)
    restored = new_learner(copy.deepcopy(tiny_llama).double(), char_tokenizer, bc_lr=1e-2)
    restored.load_state_dict(learner.state_dict())
    assert torch.equal(logits_of(restored.sampler, ids), logits_of(learner.sampler, ids))
    assert torch.equal(logits_of(initial, ids), logits_of(copy.deepcopy(tiny_llama).double(), ids))


def test_in_bf16_the_solver_samples_through_its_adapters_and_keeps_a_short_phase(tiny_llama, char_tokenizer):
    """With bf16 initial weights and BC under bf16 autocast, a merged copy would hold bf16(W + BA): a short phase's
    small update mostly rounds away. The Solver samples through the adapters instead (what BC trained), and the
    exported model merges them in float32."""
    initial = copy.deepcopy(tiny_llama).to(torch.bfloat16)
    learner = new_learner(initial, char_tokenizer, autocast=torch.bfloat16, bc_lr=1e-4)
    assert learner.sampler is learner.model
    learner.replay.add(PAIR_SETS["distinct puzzles"])
    learner.learn(lambda tensor: tensor, rank=0, world_size=1)
    update = {name: layer.get_delta_weight("default") for name, layer in learner._merges}
    lost = [  # the update elements a bf16 merge would drop
        float(
            ((initial.get_submodule(name).weight + delta).to(torch.bfloat16) == initial.get_submodule(name).weight)[
                delta != 0
            ]
            .float()
            .mean()
        )
        for name, delta in update.items()
    ]
    assert max(lost) > 0.2  # what merging in bf16 would have cost this phase
    exported = learner.exported()  # float32, the update merged exactly
    for name, delta in update.items():
        expected = initial.get_submodule(name).weight.float() + delta.float()
        torch.testing.assert_close(exported.get_submodule(name).weight, expected, rtol=0, atol=0)
    assert all(parameter.dtype == torch.bfloat16 for parameter in initial.parameters())
