# The commands the README shows. `make run` sets up and runs the main job; `make test` sets up
# and runs the tests. Both create .venv on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
# The torch to install when .venv has none. Where pip would fetch the multi-GB CUDA build on a
# machine without a GPU, point TORCH_INDEX at PyTorch's CPU-only wheels:
#   make setup TORCH_INDEX=https://download.pytorch.org/whl/cpu
# On a GPU machine, TORCH=torch (or a CUDA wheel spec).
TORCH ?= torch==2.13.0
TORCH_INDEX ?=

.PHONY: setup run trial test gpu-check lint format clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install -q -e ".[dev]" "torch==$$($(PY) -c 'import torch; print(torch.__version__.split("+")[0])')"
	touch $@
	@echo "set up: run 'source $(VENV)/bin/activate' to put loadertune on PATH (or call $(VENV)/bin/loadertune)"

run: setup  ## the main job on the embedded defaults: the default sweep
	$(VENV)/bin/loadertune -m

trial: setup  ## one trial
	$(VENV)/bin/loadertune

# Test modules run two at a time (pytest-xdist, a module's tests together so its shared
# sweeps and servers start once); TEST_WORKERS=0 runs them one after another.
TEST_WORKERS ?= 2
test: setup
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

# Every CUDA path in one run (under five minutes) with one summary; says "no CUDA device" and
# exits 0 on a machine without one.
gpu-check: setup
	$(PY) scripts/gpu_check.py

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks scripts examples
	$(VENV)/bin/ruff format --check src tests benchmarks scripts examples
	$(VENV)/bin/mypy

format: setup
	$(VENV)/bin/ruff check --fix src tests benchmarks scripts examples
	$(VENV)/bin/ruff format src tests benchmarks scripts examples

clean:
	rm -rf outputs .mypy_cache .ruff_cache .pytest_cache
