"""The learning Solver of self-play (docs/selfplay.md): behavioural cloning on the judge's passes, with replay.

Codeplay's next step (§2, "Solver"): the Solver learns by behavioural cloning (BC) from positive puzzle-solution
pairs, since PPO on it was unstable and cannot replay old puzzles against forgetting.

- `verified_pairs`: a Solver's attempts the sandbox passed, at puzzles it did not pass every time: the only way a
  generated pair enters the BC data;
- `ReplayBuffer`: the distinct pairs accepted so far, at most `solutions_per_puzzle` a puzzle, and what a phase
  trains on: the pairs new since the last phase, `replay_ratio` times as many older ones, and `corpus_ratio`
  times as many puzzles of our corpus's training split (the warm start's data);
- `bc_sequences` and `bc_loss`: each pair in the exact text the Solver samples (its few-shot prompt for the
  puzzle, then the solution's body and the `assert f(g())` that closes it in the few-shot block), the negative
  log-likelihood of the tokens after the prompt;
- `SolverLearner`: LoRA adapters on a copy of the initial weights that shares them, trained by AdamW phase after
  phase; under DDP each rank takes a share of every batch and the gradients are summed over the ranks, so every
  rank's adapters stay the same. Where BC computes in the weights' own precision, the Solver samples from a plain
  copy with the adapters merged in after each phase (sampling through unmerged adapters was 1.4x slower a token
  on 2 cores: the extra small matmuls of 7 layers x 30); where it computes in a lower one (bf16 autocast), it
  samples through the adapters, since a merged weight rounded to bf16 drops most of a short phase's update.
"""

from __future__ import annotations

import ast
import copy
import fcntl
import hashlib
import importlib
import inspect
import json
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from codeplay_lightning.config import SelfPlayConfig
from codeplay_lightning.models.architectures import attention_paths
from codeplay_lightning.models.sampling import common_prefix_length
from codeplay_lightning.models.scoring import PACK_TOKENS, balanced_budget, pack_rows, score_actions
from codeplay_lightning.puzzles import Puzzle, solver_prompt
from codeplay_lightning.solver.few_shot import G_HEADER, PuzzleResult

BC_MAX_GRAD_NORM = 1.0  # as the warm start's fine-tuning
# token slots (scored tokens, padding included) one BC forward keeps for its backward; a step's rows beyond them
# run in further forwards, their gradients summed. At the CPU scale in bf16 a step holds ~0.6 GiB + ~0.9 MiB a slot
# (measured under jemalloc): 1,536 slots keep a BC phase's iteration at about 7.4 GiB or less over the self-play
# records. Uncapped, one 799-token corpus pair padded all 11 packs of its step to 798 (8,778 slots for 2,578
# tokens) and its iteration peaked at 13.6 GiB.
BC_SLOTS = 1536
# what a solution may import to enter the BC data (`plain_solution`): the pure modules P3's solutions use
PLAIN_MODULES = frozenset(
    {"math", "itertools", "collections", "functools", "heapq", "bisect", "string", "re", "typing", "fractions"}
)
UNPLAIN_CALLS = frozenset(
    {
        "__import__",
        "eval",
        "exec",
        "compile",
        "open",
        "globals",
        "locals",
        "vars",
        "breakpoint",
        "input",
        "memoryview",
        "getattr",  # an attribute by name escapes the checks on attributes below
        "setattr",
        "delattr",
    }
)
# attributes that lead from a value to the interpreter's frames, code and globals
INTROSPECTION_PREFIXES = ("gi_", "cr_", "ag_", "f_", "tb_", "co_")
CLOSING = "\n\nassert f(g())"  # what follows a solution in the few-shot block: the Solver learns to stop there

SumOverRanks = Callable[[torch.Tensor], torch.Tensor]


def verified_pairs(results: Sequence[PuzzleResult]) -> list[Puzzle]:
    """Each attempt the sandbox passed whose program is plain (`plain_solution`), as its puzzle with that program
    as the one solution, in puzzle and attempt order, from the puzzles some attempt failed: one every attempt
    passed is one the Solver already solves (the published run's BC batches on such pairs started at 0.01-0.03
    nats a token), and cloning it again costs a phase's time for nothing to learn. The program is the judged text
    itself."""
    return [
        replace(result.puzzle, solutions=(program.g,))
        for result in results
        if result.passes < result.attempts
        for program, verdict in zip(result.programs, result.verdicts, strict=True)
        if verdict.passed and plain_solution(program.g)
    ]


def plain_solution(g: str) -> bool:
    """Whether `g` is provably plain Python over the pure modules of `PLAIN_MODULES`; anything it cannot prove plain
    is refused. It imports nothing else, calls none of `UNPLAIN_CALLS`, names no private or dunder attribute (not
    even as a string) and no attribute that leads into frames or code, and uses a module only as `module.name` for a
    public name that is no module: a module is never rebound, stored, passed or returned (`t = typing; t.sys` and
    `typing.sys` are both refused). The judge passes g only if f accepts its answer, but g runs in a process of its
    own and can forge that process's reply (written to its file descriptor, then `os._exit`): the answer is then
    right, but g does not return it in plain Python, and cloning it would teach the Solver the sandbox's protocol.
    A forgery needs `os`, `open` or introspection; P3's solutions need none of them."""
    try:
        tree = ast.parse(g)
    except SyntaxError:
        return False
    modules = {}  # the names g binds to modules, and the modules
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] not in PLAIN_MODULES or alias.name.count(".") or alias.name[0] == "_":
                    return False
                modules[alias.asname or alias.name] = importlib.import_module(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level or (node.module or "").split(".")[0] not in PLAIN_MODULES or "._" in f".{node.module}":
                return False
            module = importlib.import_module(node.module)
            if any(not _public_value(module, alias.name) for alias in node.names):
                return False
        elif isinstance(node, ast.Name) and node.id in UNPLAIN_CALLS:
            return False
        elif isinstance(node, ast.Attribute) and (
            node.attr.startswith("_") or node.attr.startswith(INTROSPECTION_PREFIXES)
        ):
            return False
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.search(r"__\w+__", node.value):
            return False
    for node in ast.walk(tree):  # (the imports bound every module name first: an import may follow its use)
        if isinstance(node, ast.Name) and node.id in modules:
            used = parents.get(node)
            if not (isinstance(used, ast.Attribute) and used.value is node and isinstance(node.ctx, ast.Load)):
                return False  # the module itself is handled, not one of its values
            if not _public_value(modules[node.id], used.attr):
                return False
    return True


def _public_value(module, name: str) -> bool:
    """Whether `module.name` is a public name that exists and is not itself a module (`typing.sys` is one)."""
    return not name.startswith("_") and hasattr(module, name) and not inspect.ismodule(getattr(module, name))


def _normalised(text: str) -> str:
    return " ".join(text.split())


class ReplayBuffer:
    """Every distinct (f, g) pair accepted so far, in arrival order; the last `new` are not trained on yet. `rng`
    draws each phase's replay and corpus shares and its order; it is checkpointed with the pairs."""

    def __init__(self, solutions_per_puzzle: int, seed: int):
        self.solutions_per_puzzle = solutions_per_puzzle
        self.pairs: list[Puzzle] = []
        self.new = 0
        self.rng = random.Random(seed)
        self._seen: set[tuple[str, str]] = set()
        self._per_puzzle: Counter[str] = Counter()

    def add(self, pairs: Sequence[Puzzle]) -> int:
        """Accepts the pairs not seen before, while their puzzle has fewer than `solutions_per_puzzle`
        solutions (puzzles and solutions compared with whitespace collapsed); returns how many."""
        accepted = 0
        for pair in pairs:
            f, g = _normalised(pair.f), _normalised(pair.solutions[0])
            if (f, g) in self._seen or self._per_puzzle[f] >= self.solutions_per_puzzle:
                continue
            self._seen.add((f, g))
            self._per_puzzle[f] += 1
            self.pairs.append(pair)
            accepted += 1
        self.new += accepted
        return accepted

    def phase(self, corpus: Sequence[Puzzle], replay_ratio: float, corpus_ratio: float) -> PhaseData:
        """A phase's pairs, which are then no longer new: all new ones, older ones and corpus puzzles drawn
        without replacement (`ratio` × the new count each, rounded; all of them if fewer), in a shuffled order."""
        older, fresh = self.pairs[: len(self.pairs) - self.new], self.pairs[len(self.pairs) - self.new :]
        replayed = self.rng.sample(older, min(len(older), round(replay_ratio * len(fresh))))
        from_corpus = self.rng.sample(list(corpus), min(len(corpus), round(corpus_ratio * len(fresh))))
        order = [*fresh, *replayed, *from_corpus]
        self.rng.shuffle(order)
        self.new = 0
        return PhaseData(order, len(fresh), len(replayed), len(from_corpus))

    def state_dict(self) -> dict:
        return {
            "pairs": [(pair.name, pair.f, pair.solutions[0], pair.ans_type) for pair in self.pairs],
            "new": self.new,
            "rng": self.rng.getstate(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.pairs, self._seen, self._per_puzzle = [], set(), Counter()
        self.add([Puzzle(name, f, (g,), ans_type) for name, f, g, ans_type in state["pairs"]])
        self.new = state["new"]
        self.rng.setstate(_as_rng_state(state["rng"]))


def _as_rng_state(state) -> tuple:
    """`random.Random.getstate()` as it went in: a checkpoint may give its tuples back as lists."""
    version, internal, gauss = state
    return version, tuple(internal), gauss


@dataclass(frozen=True)
class PhaseData:
    pairs: list[Puzzle]  # in training order
    new: int
    replayed: int
    from_corpus: int


def bc_sequences(tokenizer, examples: Sequence[Puzzle], pairs: Sequence[Puzzle]) -> list[tuple[list[int], int]]:
    """(token ids, prompt length) per pair: the Solver prompt for the pair's puzzle, tokenized as sampling
    tokenizes it, then the solution after `def g():` and the `assert f(g())` that follows it in the few-shot
    block, tokenized apart as sampled tokens continue a prompt."""
    sequences = []
    for pair in pairs:
        g = pair.solutions[0].rstrip()
        if not g.startswith(G_HEADER):
            raise ValueError(f"{pair.name}: a BC solution must start with {G_HEADER!r}, as the Solver's do")
        prompt_ids = tokenizer(solver_prompt(examples, pair))["input_ids"]
        continuation = tokenizer(g.removeprefix(G_HEADER) + CLOSING, add_special_tokens=False)["input_ids"]
        sequences.append((prompt_ids + continuation, len(prompt_ids)))
    return sequences


def bc_loss(
    model: nn.Module, sequences: Sequence[tuple[list[int], int]], device, recompute: bool = False
) -> tuple[torch.Tensor, int]:
    """(sum of -log p over the tokens after each prompt, their count) of `sequences`, in one scoring pass: the
    token prefix all of them share (the few-shot block) runs once, each sequence's rest behind it
    (`score_actions`, exact against a full forward per sequence; `recompute` as there)."""
    shared = common_prefix_length([ids for ids, _ in sequences])
    shared = min(shared, *(prompt_length for _, prompt_length in sequences))  # the targets are all actions
    prefix = torch.tensor(sequences[0][0][:shared], device=device)
    rests = [ids[shared:] for ids, _ in sequences]
    width = max(map(len, rests))
    action_ids = torch.zeros(len(rests), width, dtype=torch.long, device=device)
    mask = torch.zeros(len(rests), width, device=device)
    target = torch.zeros(len(rests), width, device=device)
    for row, (rest, (_, prompt_length)) in enumerate(zip(rests, sequences)):
        action_ids[row, : len(rest)] = torch.tensor(rest)
        mask[row, : len(rest)] = 1
        target[row, prompt_length - shared : len(rest)] = 1
    logprobs, _, _ = score_actions(model, prefix, action_ids, mask, temperature=1.0, recompute=recompute)
    return -(logprobs * target).sum(), int(target.sum())


def bc_groups(
    sequences: Sequence[tuple[list[int], int]], slots: int, packed: bool = True
) -> list[list[tuple[list[int], int]]]:
    """`sequences` in groups, longest first, each scored by one `bc_loss` in at most `slots` token slots (a
    sequence longer than that alone). Slots are what `score_actions` runs behind the shared prefix: on the packed
    path its packs, every one as long as the longest (one long row pads them all); on the row path each row with
    the prompt, as long as the longest. A step's loss and gradient are sums over its sequences, so any grouping
    gives the same step; the prefix runs once more per further group."""
    shared = min(common_prefix_length([ids for ids, _ in sequences]), *(length for _, length in sequences))
    groups: list[list[tuple[list[int], int]]] = []
    fed: list[list[int]] = []  # tokens each row feeds behind the prefix, per group
    for sequence in sorted(sequences, key=lambda sequence: len(sequence[0]), reverse=True):
        count = len(sequence[0]) - shared - 1
        if groups and scored_slots([*fed[-1], count], shared, packed) <= slots:
            groups[-1].append(sequence)
            fed[-1].append(count)
        else:
            groups.append([sequence])
            fed.append([count])
    return groups


def scored_slots(fed: list[int], prefix: int, packed: bool) -> int:
    """Token slots `score_actions` runs for rows feeding `fed` tokens behind a `prefix`-token prompt: its packs
    (`_packed_states`), or its rows with the prompt (`_row_states`)."""
    if not packed:
        return len(fed) * (prefix + max(fed) + 1)
    packs, offsets = pack_rows(fed, balanced_budget(fed, PACK_TOKENS))
    return (packs[-1] + 1) * max(offset + count for offset, count in zip(offsets, fed))


def sharing_copy(model: nn.Module) -> nn.Module:
    """A copy of `model`'s modules whose parameters are `model`'s own tensors: adapters injected into the copy
    leave `model` as it is, and the copy costs no weights. Moves of `model` move them for both (they are moved
    in place)."""
    return copy.deepcopy(model, memo={id(parameter): parameter for parameter in model.parameters()})


class SolverLearner:
    """The learning Solver: LoRA adapters (rank `config.lora_rank`, every linear layer but the output) on a
    weight-sharing copy of `initial`, the model holding the initial weights, which the initial Solver and the
    Setter's reference keep using unchanged. The adapters start at zero update, seeded by `seed` without
    touching the global RNG. `autocast` is the dtype BC computes in (None: the weights' own);
    `recompute_activations` as `score_actions`' `recompute`."""

    def __init__(
        self,
        initial: nn.Module,
        tokenizer,
        examples: Sequence[Puzzle],
        config: SelfPlayConfig,
        corpus: Sequence[Puzzle],
        seed: int,
        autocast: torch.dtype | None,
        recompute_activations: bool = False,
    ):
        from peft import LoraConfig, get_peft_model
        from peft.tuners.lora import LoraLayer

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            lora = LoraConfig(
                r=config.lora_rank,
                lora_alpha=2 * config.lora_rank,
                lora_dropout=0.0,
                target_modules="all-linear",
                task_type="CAUSAL_LM",
            )
            self.model = get_peft_model(sharing_copy(initial), lora).eval()
        # what the Solver samples from: a merged copy (exact in the weights' own precision), or the adapters
        # themselves (rounding W + BA to bf16 dropped 38% of a 3-step phase's update elements)
        self.sampler = copy.deepcopy(initial).requires_grad_(False).eval() if autocast is None else self.model
        self._merges = [
            (name.removeprefix("base_model.model."), layer)
            for name, layer in self.model.named_modules()
            if isinstance(layer, LoraLayer)
        ]
        self.tokenizer, self.examples, self.config = tokenizer, tuple(examples), config
        self.corpus, self.autocast, self.recompute_activations = tuple(corpus), autocast, recompute_activations
        self.optimizer = torch.optim.AdamW(self.adapters(), lr=config.bc_lr)
        self.replay = ReplayBuffer(config.solutions_per_puzzle, seed)
        self.phases = 0

    def adapters(self) -> list[nn.Parameter]:
        return [parameter for parameter in self.model.parameters() if parameter.requires_grad]

    def to(self, device) -> None:
        self.model.to(device)
        self.sampler.to(device)

    @torch.no_grad()
    def merge(self) -> None:
        """A merged sampler's weights become the learner's: each adapted layer's initial weight plus its adapters'
        update, computed from the adapters alone (so a resumed run merges the same weights). A sampler that is
        the learner has nothing to merge."""
        if self.sampler is self.model:
            return
        for name, layer in self._merges:
            target = self.sampler.get_submodule(name)
            target.weight.copy_(layer.get_base_layer().weight + layer.get_delta_weight("default"))

    def exported(self) -> nn.Module:
        """The learner as a plain model in float32, its adapters merged there (exactly): what `codeplay evaluate
        --llm` loads."""
        return copy.deepcopy(self.model).float().merge_and_unload().eval()

    def learn(self, sum_over_ranks: SumOverRanks, rank: int, world_size: int) -> dict[str, float]:
        """One BC phase on `replay.phase(...)`: `bc_epochs` passes in batches of `bc_batch_size` sequences, each
        rank scoring every `world_size`-th sequence of a batch from its `rank`-th. The step's loss is the mean
        over all ranks' target tokens; every rank sums the gradients of all and steps alike. Returns the
        phase's counts and its first and last batch's loss (each rank alike; no step without new pairs)."""
        data = self.replay.phase(self.corpus, self.config.replay_ratio, self.config.corpus_ratio)
        record = {"new_pairs": data.new, "replayed": data.replayed, "from_corpus": data.from_corpus, "steps": 0}
        self.phases += 1
        if not data.new:
            return record
        sequences = bc_sequences(self.tokenizer, self.examples, data.pairs)
        device = self.adapters()[0].device
        losses = []
        for _ in range(self.config.bc_epochs):
            for start in range(0, len(sequences), self.config.bc_batch_size):
                batch = sequences[start : start + self.config.bc_batch_size]
                losses.append(self._step(batch[rank::world_size], sum_over_ranks, device))
        self.merge()
        return record | {"steps": len(losses), "loss_first": losses[0], "loss_last": losses[-1]}

    def _step(self, mine: Sequence[tuple[list[int], int]], sum_over_ranks: SumOverRanks, device) -> float:
        adapters = self.adapters()
        loss = torch.zeros((), device=device)
        tokens = sum(len(ids) - prompt_length for ids, prompt_length in mine)  # bc_loss's count, summed
        total = sum_over_ranks(torch.tensor(float(tokens), device=device))
        groups = bc_groups(mine, BC_SLOTS, attention_paths(self.model).fast) if mine else []
        for group in groups:  # at most BC_SLOTS token slots kept for a backward at a time
            with torch.autocast(device.type, self.autocast, enabled=self.autocast is not None):
                group_loss, _ = bc_loss(self.model, group, device, self.recompute_activations)
            (group_loss / total).backward()
            loss = loss + group_loss.detach()
        gradients = torch.cat([_gradient(parameter).flatten() for parameter in adapters])
        gradients = sum_over_ranks(gradients)
        offset = 0
        for parameter in adapters:
            parameter.grad = gradients[offset : offset + parameter.numel()].view_as(parameter).clone()
            offset += parameter.numel()
        torch.nn.utils.clip_grad_norm_(adapters, BC_MAX_GRAD_NORM)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(sum_over_ranks(loss.detach().float()) / total)

    def state_dict(self) -> dict:
        return {
            "adapters": [parameter.detach().cpu().clone() for parameter in self.adapters()],
            "optimizer": self.optimizer.state_dict(),
            "replay": self.replay.state_dict(),
            "phases": self.phases,
        }

    def load_state_dict(self, state: dict) -> None:
        adapters = self.adapters()
        if len(state["adapters"]) != len(adapters):
            raise ValueError(f"the checkpoint holds {len(state['adapters'])} Solver adapters, this run {len(adapters)}")
        with torch.no_grad():
            for parameter, saved in zip(adapters, state["adapters"]):
                parameter.copy_(saved)
        self.optimizer.load_state_dict(state["optimizer"])
        self.replay.load_state_dict(state["replay"])
        self.phases = state["phases"]
        self.merge()


def _gradient(parameter: nn.Parameter) -> torch.Tensor:
    return parameter.grad if parameter.grad is not None else torch.zeros_like(parameter)


def selfplay_corpus(heldout: int, workers: int) -> tuple[list[Puzzle], list[Puzzle]]:
    """Our corpus's training-split pairs (every reference solution of each instance, as the warm start trained on
    them) and its first `heldout` held-out-family puzzles. The corpus is drawn as `codeplay corpus --seed 0` draws
    it (the warm start's instances, in the same order), verified in a sandbox of `workers`, once per version of
    the families' code: into the cache (`corpus_path`), under a lock, so that every DDP rank reads the same file."""
    from codeplay_lightning.corpus import FAMILIES, HELDOUT_FAMILIES
    from codeplay_lightning.corpus.build import CORPUS_TIMEOUT, build_corpus
    from codeplay_lightning.execution import Sandbox
    from codeplay_lightning.puzzles import load_p3
    from codeplay_lightning.puzzles.files import split_and_groups

    size = max(400, 8 * heldout)  # 11 of the 73 families are held out: 800 drawn gave 121
    path = corpus_path(size)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.with_suffix(".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one process draws; the others wait for its file
        if not path.is_file():
            with Sandbox(workers=workers, timeout=CORPUS_TIMEOUT) as sandbox:
                entries, _ = build_corpus(FAMILIES, HELDOUT_FAMILIES, size, 0, sandbox)
            partial = path.with_suffix(".partial")
            partial.write_text(json.dumps(entries, indent=1) + "\n")
            partial.replace(path)
    splits, _ = split_and_groups(path)
    puzzles = load_p3(path)
    train = [replace(p, solutions=(g,)) for p in puzzles if splits[p.name] == "train" for g in p.solutions]
    families = [p for p in puzzles if splits[p.name] == "heldout_families"][:heldout]
    if len(families) < heldout:
        raise ValueError(f"{path} holds {len(families)} held-out-family puzzles, fewer than selfplay.eval_heldout")
    return train, families


def corpus_path(size: int) -> Path:
    """Where `selfplay_corpus` keeps a corpus of `size` instances: named by a digest of the families' code."""
    from codeplay_lightning import corpus
    from codeplay_lightning.models.loading import cache_root

    sources = sorted(Path(corpus.__file__).parent.glob("*.py"))
    digest = hashlib.sha256(b"".join(source.read_bytes() for source in sources)).hexdigest()[:12]
    return cache_root() / f"corpus-seed0-{size}-{digest}.json"
