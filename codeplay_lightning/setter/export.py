"""A trained Setter as a Hugging Face model directory, which `transformers`, `codeplay evaluate --llm` and
`codeplay synthesize --llm` load: `export_policy(checkpoint, out)`.

The checkpoint's policy weights go into the model its config names (`model.name`, loaded as training loads it);
LoRA adapters are merged into the base weights, so the directory is a plain model of the base's architecture. The
value head stays behind: it is PPO's, not the Setter's. Beside the weights and the tokenizer:

    README.md               the model card: what the model is, the prompt, where a puzzle ends, the few-shot
                            puzzles, and ten lines of stock transformers that write a puzzle
    prompt.txt              the exact Setter prompt training sampled from (`setter_sampling_prompt`)
    generation_config.json  sampling as training sampled (temperature, the whole vocabulary) and the stop:
                            `stop_strings`, the puzzle's end at the first blank line (SETTER_STOP)
    codeplay.yaml           the run's whole config

The Setter is a completion model: the base's chat template is not written. Every file is mode 0644, readable by
others (safetensors writes its weights 0600).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from transformers import GenerationConfig, PreTrainedModel

from codeplay_lightning.config import ConfigError, ModelConfig, RolloutConfig
from codeplay_lightning.models.loading import load_causal_lm, with_lora
from codeplay_lightning.puzzles import SETTER_STOP, Puzzle, fewshot_puzzles, setter_prompt
from codeplay_lightning.setter.checkpoint import CONFIG_KEY
from codeplay_lightning.setter.rollout import setter_sampling_prompt

CONFIG_FILE, PROMPT_FILE, CARD_FILE = "codeplay.yaml", "prompt.txt", "README.md"
FILE_MODE = 0o644
# what every valid puzzle starts with (it defines `f`): transformers' stop strings also match across the prompt's
# last token, so the card's generation starts here, after the blank line that would otherwise complete the stop
PUZZLE_START = "def f("


def export_policy(checkpoint: Path, out: Path) -> Path:
    """Write `checkpoint`'s policy, its tokenizer, prompt, stop and model card into the new directory `out`;
    returns `out`."""
    saved = torch.load(checkpoint, map_location="cpu", weights_only=False, mmap=True)
    model = saved_settings(saved, checkpoint, "model", ModelConfig)
    rollout = saved_settings(saved, checkpoint, "rollout", RolloutConfig)
    policy, tokenizer = load_causal_lm(model.name)
    policy = trained_policy(policy, model, saved["state_dict"])
    policy.generation_config = setter_generation(policy.generation_config, rollout)
    tokenizer.chat_template = None  # a completion model: the base's chat turns are not its format (no .jinja)
    examples = fewshot_puzzles()[: rollout.fewshot]
    prompt = setter_sampling_prompt(tokenizer, examples)
    out.mkdir(parents=True)
    policy.save_pretrained(out)
    tokenizer.save_pretrained(out)
    drop_chat_template(out / "tokenizer_config.json")
    (out / PROMPT_FILE).write_text(prompt)
    (out / CARD_FILE).write_text(model_card(out, saved, model, rollout, examples, prompt))
    (out / CONFIG_FILE).write_text(OmegaConf.to_yaml(saved[CONFIG_KEY]))
    for path in out.iterdir():
        path.chmod(FILE_MODE)
    return out


def trained_policy(policy: PreTrainedModel, model: ModelConfig, state_dict: dict) -> PreTrainedModel:
    """`policy` (the model `model.name` loads) with the trained weights of a checkpoint's `state_dict`, LoRA
    adapters merged in."""
    if model.lora_rank:
        policy = with_lora(policy, model)
    weights = {key.removeprefix("policy."): value for key, value in state_dict.items() if key.startswith("policy.")}
    policy.load_state_dict(weights, strict=True)
    return policy.merge_and_unload() if model.lora_rank else policy


def setter_generation(base: GenerationConfig, rollout: RolloutConfig) -> GenerationConfig:
    """The base's generation config (its token ids) with the Setter's sampling: at the rollout's temperature over
    the whole vocabulary, at most a stream's steps of new tokens, stopping at the end of the puzzle."""
    generation = copy.deepcopy(base)
    generation.update(
        do_sample=True,
        temperature=rollout.temperature,
        top_k=0,
        top_p=1.0,
        max_new_tokens=rollout.n_steps,  # a training stream's token steps: no trained puzzle was longer
        stop_strings=list(SETTER_STOP),
    )
    return generation


def drop_chat_template(tokenizer_config: Path) -> None:
    """The tokenizer's config without its `chat_template` key, which transformers writes as null when there is
    none."""
    settings = json.loads(tokenizer_config.read_text())
    settings.pop("chat_template", None)
    tokenizer_config.write_text(json.dumps(settings, indent=2, ensure_ascii=False) + "\n")


def saved_settings(saved: dict, path: Path, section: str, schema: type):
    """The `section:` settings a checkpoint was trained with, as `schema` (only these: the rest of the run's config
    may name files of another machine); refused in one line when it carries no config or one this version cannot
    read."""
    if CONFIG_KEY not in saved:
        raise ConfigError(f"checkpoint {path} carries no config: it was written by an earlier version")
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), saved[CONFIG_KEY][section]))
    except (OmegaConfBaseException, KeyError, ValueError) as error:
        lines = str(error).strip().splitlines() or [type(error).__name__]
        raise ConfigError(f"checkpoint {path}'s {section} settings do not fit this version: {lines[0]}") from None


def model_card(
    out: Path, saved: dict, model: ModelConfig, rollout: RolloutConfig, examples: list[Puzzle], prompt: str
) -> str:
    """README.md of the exported Setter: what it is, its prompt and stop, ten lines of stock transformers that
    write a puzzle with them, and the few-shot puzzles of its prompt."""
    config = saved[CONFIG_KEY]
    reward = config["reward"]
    tuning = f"LoRA of rank {model.lora_rank} merged in" if model.lora_rank else "full fine-tune"
    rest = setter_prompt(examples)[len(prompt) :]  # what the sampling prompt leaves of the last blank line
    start = rest + PUZZLE_START
    ending = [
        f"blank line, less its final {rest!r}: so the prompt's tokens are the block's own (SmolLM2's tokenizer makes a",
        f"final blank line one token, which the block never shows), and the model writes {rest!r} itself, as each",
        "puzzle's first token.",
    ]
    if not rest:
        ending = ["blank line."]
    stop = ", ".join(repr(stop) for stop in SETTER_STOP)
    lines = [
        "---",
        "library_name: transformers",
        "pipeline_tag: text-generation",
        "tags: [codeplay, ppo, programming-puzzles]",
        "---",
        "",
        f"# Codeplay Setter: {config['name']}",
        "",
        "A Setter trained with PPO by codeplay_lightning: a completion model (no chat template) that writes Python",
        "programming puzzles in the format of the Codeplay paper (appendix B): a function `f` whose answer `g()`",
        "makes `f(g())` true. It continues a few-shot prompt with one puzzle, `def f(...)` and its body.",
        "",
        f"- base: `{model.name}` ({tuning}); value head left behind",
        f"- trained: {saved['epoch'] + 1} PPO iteration(s) of run `{config['name']}`, seed {config['trainer']['seed']}",
        f"- reward: w_difficulty={reward['w_difficulty']}, w_novelty={reward['w_novelty']}, "
        f"combine={reward['combine']}, difficulty={reward['difficulty']}",
        f"- the run's whole config: `{CONFIG_FILE}`",
        "",
        "## Prompt",
        "",
        f"`{PROMPT_FILE}` is the exact text training sampled from: `from typing import List`, a blank line, then",
        f"{len(examples)} few-shot puzzles, each `def f`, a blank line, `def g`, a blank line, `assert f(g())` and a",
        *ending,
        "",
        "## Where a puzzle ends",
        "",
        f"At the first blank line after `def f`: `stop_strings` [{stop}] in `generation_config.json`, which also",
        f"samples as training did (temperature {rollout.temperature} over the whole vocabulary: top_k 0, top_p 1;",
        f"at most {rollout.n_steps} new tokens, a training stream's steps). transformers applies stop strings only",
        "when the tokenizer is passed to `generate`, and matches them across the prompt's last token too: start",
        f"the generation at the puzzle's first characters, {start!r}, as below. Samplers whose stop applies to the",
        f"generated text alone (vLLM, llama.cpp) take `{PROMPT_FILE}` as it is.",
        "",
        "## Write a puzzle with transformers",
        "",
        "```python",
        "from pathlib import Path",
        "",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        f"directory = Path({str(out)!r})",
        "tokenizer = AutoTokenizer.from_pretrained(directory)",
        "model = AutoModelForCausalLM.from_pretrained(directory)",
        f"inputs = tokenizer((directory / {PROMPT_FILE!r}).read_text() + {start!r}, return_tensors='pt')",
        "output = model.generate(**inputs, tokenizer=tokenizer)  # sampling and stop: generation_config.json",
        "new_text = tokenizer.decode(output[0, inputs['input_ids'].shape[1] :], skip_special_tokens=True)",
        f"puzzle = {PUZZLE_START!r} + new_text.split({SETTER_STOP[0]!r})[0]",
        "print(puzzle)",
        "```",
        "",
        "## The few-shot puzzles",
        "",
        f"The bundled puzzles tagged `fewshot`, the first {len(examples)} (`rollout.fewshot`), in the prompt's order:",
    ]
    for example in examples:
        lines += ["", f"### {example.name}", "", "```python", example.f.rstrip(), "", example.solutions[0].rstrip()]
        lines += ["```"]
    return "\n".join(lines) + "\n"
