"""GIF-MCTS: Generate, Improve and Fix with Monte Carlo Tree Search (Dainese et al. 2024, §4, app. A).

Nodes are programs, edges are LLM actions. A node stores a *state* (a prefix of its program that
grows by L lines per level) and a *rollout* (the rest); the full program state + rollout is what is
evaluated. Each iteration selects with UCT down to an unexpanded action, calls the LLM once,
evaluates the new program and backpropagates its score (mean returns, γ = 1). An iteration is two
steps, `prompts()` (selection) and `receive(completions)` (expansion, evaluation, backpropagation), so
that `run_searches` can put many searches' LLM calls into one batch.

Choices where the paper is vague (each marked "ours" below):
- improve / fix rewrite the whole program; their child's state is its first (parent's state lines + L)
  lines, the same cut a generate makes, so that every level of the tree adds L lines of state;
- a buggy node backpropagates nothing (neither its 0 nor its temporary value); visit counts still
  grow along the path. When a fix chain succeeds, the fixed score flows back through the chain, which
  sets the buggy nodes' values to it (app. A);
- a fix chain's nodes share one temporary value, 0.99·(1 − k/f) after k failed fixes;
- w_G, w_L: per action type, positive weights fitted by one gradient step on log-weights per
  expansion, on the squared error between the estimate made before the expansion and the new child's
  value (0 when buggy); only when v_L exists, since otherwise the estimate does not depend on them.

Where the paper is ambiguous we follow the authors' code (`ucb_score`, `select`, `backprop`):
- UCT's n is the count of the parent's expanded children of the action's type for an unexpanded
  action, and the child's own visit count for an expanded child;
- visits are counted at backpropagation (the new child included, a buggy one too), with the root
  starting at one: a node revisited for the first time has ln N = 0;
- ties are broken at random (seeded per search).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field

from codeplay_lightning.search.tasks import Task, extract_code, generated_program

ROOT, GENERATE, IMPROVE, FIX = "root", "generate", "improve", "fix"
ESTIMATED_ACTIONS = (GENERATE, IMPROVE)  # action types whose unexplored value is estimated (app. A)


@dataclass
class GifMctsConfig:
    budget: int = 50  # B: LLM calls (paper §5.3)
    new_lines: int = 2  # L: lines of state a level adds (table 4)
    exploration: float = 0.1  # C in UCT (table 4)
    visit_offset: float = 1.0  # ε in UCT (table 4)
    prior_generate: float = 0.5  # v_g prior (table 4)
    prior_improve: float = 0.55  # v_i prior (table 4)
    prior_count: int = 2  # pseudo-count of each prior (table 4)
    max_fixes: int = 3  # f: fixes allowed in a row (table 4)
    buggy_value: float = 0.99  # first temporary value of a buggy node (app. A)
    weight_lr: float = 1.0  # step size of the online w_G / w_L fit (ours: the paper gives none)
    # The action types below the root, which always generates once; the paper's ablations (app. B, table 6) leave
    # one of the three out.
    actions: tuple[str, ...] = ("generate", "improve", "fix")

    def __post_init__(self):
        if self.budget < 1 or self.new_lines < 1 or self.max_fixes < 1 or self.prior_count < 0:
            raise ValueError(f"invalid GifMctsConfig: {self}")
        if not set(self.actions) <= {GENERATE, IMPROVE, FIX} or not {GENERATE, IMPROVE} & set(self.actions):
            raise ValueError(
                f"GifMctsConfig.actions must be some of generate, improve, fix, with generate or improve; "
                f"got {self.actions}"
            )


@dataclass(eq=False)
class Node:
    action: str  # the action that made this node: root | generate | improve | fix
    state: str
    rollout: str = ""
    score: float = 0.0  # the evaluation of state + rollout
    buggy: bool = False
    error: str = ""
    failing_example: str | None = None
    fix_depth: int = 0  # fixes in a row that produced this node
    temp_value: float | None = None  # buggy nodes only (app. A); never backpropagated
    value_sum: float = 0.0  # backpropagated scores
    value_count: int = 0
    visits: int = 0
    children: list[Node] = field(default_factory=list)

    @property
    def program(self) -> str:
        return self.state + self.rollout

    @property
    def value(self) -> float:
        """Mean backpropagated score; 0 for a buggy node nothing has reached yet (paper §4)."""
        return self.value_sum / self.value_count if self.value_count else 0.0

    @property
    def selection_value(self) -> float:
        """v_i in UCT: the temporary value stands in for a buggy node until a fix succeeds."""
        if self.buggy and self.value_count == 0:
            return self.temp_value or 0.0
        return self.value

    def to_dict(self) -> dict:
        return {
            "action": self.action,
            "state": self.state,
            "rollout": self.rollout,
            "program": self.program,
            "score": self.score,
            "value": self.value,
            "visits": self.visits,
            "buggy": self.buggy,
            "error": self.error,
            "failing_example": self.failing_example,
            "fix_depth": self.fix_depth,
            "temp_value": self.temp_value,
            "value_sum": self.value_sum,
            "value_count": self.value_count,
            "children": [child.to_dict() for child in self.children],
        }

    def walk(self):
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass(frozen=True)
class SearchResult:
    program: str  # the best program found
    score: float
    calls: int  # LLM calls spent
    solved_at: int | None = None  # the call that produced the first program scoring 1


@dataclass
class Selection:
    """A selected, not yet expanded action: the path from the root to `node` (visits counted) and
    the estimate of the action's value made before expanding it (for the weight fit)."""

    path: list[Node]
    node: Node
    action: str
    estimate: tuple[float, float | None] | None


def split_program(program: str, state_lines: int) -> tuple[str, str]:
    """(state, rollout): the first `state_lines` lines and the rest."""
    lines = program.splitlines(keepends=True)
    return "".join(lines[:state_lines]), "".join(lines[state_lines:])


class GifMcts:
    def __init__(self, task: Task, config: GifMctsConfig | None = None, seed: int = 0):
        self.task = task
        self.config = config or GifMctsConfig()
        self.rng = random.Random(seed)  # breaks UCT ties
        self.root = Node(ROOT, task.root_code, visits=1)
        self.calls = 0
        self.weights = {action: [1.0, 1.0] for action in ESTIMATED_ACTIONS}  # [w_G, w_L] per action type
        self.best: Node | None = None
        self.solved_at: int | None = None
        self.selection: Selection | None = None

    # ------------------------------------------------------------------ the search loop

    @property
    def finished(self) -> bool:
        """The budget of LLM calls is spent or a program scores 1 (early stop)."""
        return self.calls >= self.config.budget or self.solved_at is not None

    def prompts(self) -> list[str]:
        """Selection down to an unexpanded action; the prompt that expands it ([] once finished)."""
        if self.finished:
            return []
        if self.selection is None:
            self.selection = self.select_path()
        return [self.prompt(self.selection.node, self.selection.action)]

    def receive(self, completions: list[str]) -> Node:
        """Expansion with the LLM's completion, evaluation and backpropagation; returns the new node."""
        (completion,) = completions
        selection, self.selection = self.selection, None
        child = self.expand(selection.node, selection.action, completion, selection.estimate)
        self.backpropagate(selection.path, child)
        return child

    def result(self) -> SearchResult:
        best = self.best
        return SearchResult(best.program if best else "", best.score if best else 0.0, self.calls, self.solved_at)

    def select_path(self) -> Selection:
        """UCT from the root down to an unexpanded action (visits are counted at backpropagation)."""
        node, path = self.root, [self.root]
        while not isinstance(choice := self.select(node), str):
            node = choice
            path.append(node)
        estimate = (self.global_value(choice), self.local_value(node, choice)) if choice in ESTIMATED_ACTIONS else None
        return Selection(path, node, choice, estimate)

    # ------------------------------------------------------------------ selection

    def actions(self, node: Node) -> list[str]:
        """Unexpanded actions (app. A): the root only generates; a healthy node always has a fresh
        generate and improve (progressive widening); a buggy node has a single fix, up to f in a row.
        Only the types in `config.actions`; the root generates the first program anyway (paper app. B), and again
        when no node below it can be expanded (ours: a dead tree without generate could not spend its budget)."""
        if node.action == ROOT:
            can_generate = GENERATE in self.config.actions or not any(self.alive(c) for c in node.children)
            return [GENERATE] if can_generate else []
        if not node.buggy:
            return [action for action in (GENERATE, IMPROVE) if action in self.config.actions]
        can_fix = FIX in self.config.actions and not node.children and node.fix_depth < self.config.max_fixes
        return [FIX] if can_fix else []

    def alive(self, node: Node) -> bool:
        """False for a buggy chain whose fixes ran out: selecting it could expand nothing."""
        if not node.buggy:
            return True
        return bool(self.actions(node)) or any(self.alive(child) for child in node.children)

    def expanded_count(self, node: Node, action: str) -> int:
        """n_{a=a_i}: the node's expanded children of that action type."""
        return sum(child.action == action for child in node.children)

    def exploration_bonus(self, node: Node, count: int) -> float:
        """C·sqrt(ln N_parent / (n + ε)) (app. A); n as the module docstring says."""
        return self.config.exploration * math.sqrt(math.log(node.visits) / (count + self.config.visit_offset))

    def uct_scores(self, node: Node) -> list[tuple[float, Node | str]]:
        """UCT of every choice at `node`: its alive children, then its unexpanded actions."""
        scores: list[tuple[float, Node | str]] = []
        for child in node.children:
            if self.alive(child):
                scores.append((child.selection_value + self.exploration_bonus(node, child.visits), child))
        for action in self.actions(node):
            value = self.unexplored_value(node, action) if action in ESTIMATED_ACTIONS else node.selection_value
            scores.append((value + self.exploration_bonus(node, self.expanded_count(node, action)), action))
        return scores

    def select(self, node: Node) -> Node | str:
        """The highest UCT choice, ties broken at random."""
        scores = self.uct_scores(node)
        best = max(score for score, _ in scores)
        return self.rng.choice([choice for score, choice in scores if score == best])

    # ------------------------------------------------------------------ unexplored value (app. A)

    def global_value(self, action: str) -> float:
        """v_G: mean value of all nodes of that type in the tree, with the prior counted prior_count times."""
        config = self.config
        prior = config.prior_generate if action == GENERATE else config.prior_improve
        values = [node.value for node in self.root.walk() if node.action == action]
        return (prior * config.prior_count + sum(values)) / (config.prior_count + len(values))

    def local_value(self, node: Node, action: str) -> float | None:
        """v_L: mean value of the node's expanded children of that type (None when it has none)."""
        values = [child.value for child in node.children if child.action == action]
        return sum(values) / len(values) if values else None

    def unexplored_value(self, node: Node, action: str) -> float:
        """v_i = (w_G·v_G + w_L·v_L) / (w_G + w_L); just v_G when there is no v_L."""
        v_global, v_local = self.global_value(action), self.local_value(node, action)
        if v_local is None:
            return v_global
        w_global, w_local = self.weights[action]
        return (w_global * v_global + w_local * v_local) / (w_global + w_local)

    def fit_weights(self, action: str, v_global: float, v_local: float, target: float) -> None:
        """One gradient step on log w of ½(v_i − target)², which keeps both weights positive (ours)."""
        w_global, w_local = self.weights[action]
        total = w_global + w_local
        prediction = (w_global * v_global + w_local * v_local) / total
        error = prediction - target
        grad_log_w_global = error * w_global * (v_global - prediction) / total  # d loss / d log w_G
        grad_log_w_local = error * w_local * (v_local - prediction) / total
        self.weights[action] = [
            w_global * math.exp(-self.config.weight_lr * grad_log_w_global),
            w_local * math.exp(-self.config.weight_lr * grad_log_w_local),
        ]

    # ------------------------------------------------------------------ expansion and backpropagation

    def prompt(self, node: Node, action: str) -> str:
        if action == GENERATE:  # continue the node's state (paper §4, fig. 3)
            return self.task.generate_prompt(node.state)
        if action == IMPROVE:  # full program + one failing example (fig. 4)
            return self.task.improve_prompt(node.program, node.failing_example or "")
        return self.task.fix_prompt(node.program, node.error)  # full program + error (fig. 5)

    def expand(
        self, node: Node, action: str, completion: str, estimate: tuple[float, float | None] | None = None
    ) -> Node:
        """The child that `completion` (the LLM's answer to `prompt(node, action)`) makes."""
        self.calls += 1
        program = generated_program(node.state, completion) if action == GENERATE else extract_code(completion)
        evaluation = self.task.evaluate(program)
        state_lines = len(node.state.splitlines(keepends=True)) + self.config.new_lines
        state, rollout = split_program(program, state_lines)
        child = Node(
            action,
            state,
            rollout,
            score=evaluation.score,
            buggy=evaluation.buggy,
            error=evaluation.error,
            failing_example=evaluation.failing_example,
            fix_depth=node.fix_depth + 1 if action == FIX else 0,
        )
        node.children.append(child)  # the parent's action of this type stays open: progressive widening
        if child.buggy:
            # 0.99, decreasing linearly to 0 after f failed fixes (app. A); shared by the whole chain
            child.temp_value = self.config.buggy_value * max(0.0, 1 - child.fix_depth / self.config.max_fixes)
            if action == FIX:
                self.lower_chain(node, child.temp_value)
        if self.best is None or child.score > self.best.score:
            self.best = child
        if child.score >= 1.0 and self.solved_at is None:
            self.solved_at = self.calls
        if estimate is not None and estimate[1] is not None:
            self.fit_weights(action, estimate[0], estimate[1], target=0.0 if child.buggy else child.score)
        return child

    def lower_chain(self, node: Node, temp_value: float) -> None:
        """A fix failed: every buggy node of the fix chain above takes the lower temporary value."""
        while node.buggy:
            node.temp_value = temp_value
            parent = self.parent(node)
            if parent is None:
                return
            node = parent

    def parent(self, target: Node) -> Node | None:
        return next((node for node in self.root.walk() if any(c is target for c in node.children)), None)

    def backpropagate(self, path: list[Node], child: Node) -> None:
        """Count a visit of the child and its ancestors and add the child's score to them (γ = 1). A
        buggy child's temporary value is never backpropagated (app. A), nor is its 0 (ours)."""
        for node in [*path, child]:
            node.visits += 1
            if not child.buggy:
                node.value_sum += child.score
                node.value_count += 1

    # ------------------------------------------------------------------ serialisation

    def to_json(self) -> str:
        """The search as a record: its counts, the fitted w_G / w_L and the whole tree."""
        missing = [action for action in (GENERATE, IMPROVE, FIX) if action not in self.config.actions]
        return json.dumps(
            {
                "method": "gif-mcts" + "".join(f"-no-{action}" for action in missing),  # an ablation's name
                "calls": self.calls,
                "solved_at": self.solved_at,
                "weights": self.weights,
                "root": self.root.to_dict(),
            }
        )
