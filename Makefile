# Two entry points for a fresh machine: `make demo` and `make test`.
# Each creates .venv (Python 3.11) and installs the pinned dependencies if needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
OUT := out

.PHONY: demo test lint bench-ir clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "graphsub needs Python 3.11, found " + sys.version' 
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev,suite]'
	touch $(STAMP)

demo: $(STAMP)
	mkdir -p $(OUT)
	$(BIN)/graphsub zoo list
	$(BIN)/graphsub info zoo:resnext50
	$(BIN)/graphsub zoo export resnext50 -o $(OUT)/resnext50.onnx
	$(BIN)/graphsub convert $(OUT)/resnext50.onnx -o $(OUT)/resnext50_roundtrip.onnx
	$(BIN)/graphsub verify $(OUT)/resnext50.onnx $(OUT)/resnext50_roundtrip.onnx
	$(BIN)/graphsub zoo export nasrnn -o $(OUT)/nasrnn.onnx
	$(BIN)/graphsub optimize $(OUT)/nasrnn.onnx -o $(OUT)/nasrnn_opt.onnx --budget 15

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy

test: $(STAMP) lint
	$(BIN)/pytest

bench-ir: $(STAMP)
	$(BIN)/python benchmarks/ir_micro.py

clean:
	rm -rf $(OUT) .pytest_cache .ruff_cache .mypy_cache
