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
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev,suite,ray]'
	touch $(STAMP)

demo: $(STAMP)
	mkdir -p $(OUT)
	$(BIN)/graphsub zoo list
	$(BIN)/graphsub info zoo:resnext50
	$(BIN)/python examples/export_encoder.py $(OUT)/encoder.onnx
	$(BIN)/graphsub optimize $(OUT)/encoder.onnx -o $(OUT)/encoder_fast.onnx --budget 120 \
		--report $(OUT)/encoder_report.html

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/mypy

test: $(STAMP) lint
	$(BIN)/pytest

bench-ir: $(STAMP)
	$(BIN)/python benchmarks/ir_micro.py

clean:
	rm -rf $(OUT) .pytest_cache .ruff_cache .mypy_cache
