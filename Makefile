# Two entry points for a fresh machine: `make demo` and `make test`.
# Each creates .venv (Python 3.11) and installs the pinned dependencies if needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
OUT := out

.PHONY: demo test test-all lint docs wheel wheel-smoke bench-ir clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "graphsub needs Python 3.11, found " + sys.version' 
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev,suite,ray,docs]'
	touch $(STAMP)

demo: $(STAMP)
	mkdir -p $(OUT)
	$(BIN)/graphsub zoo list
	$(BIN)/graphsub info zoo:resnext50
	$(BIN)/python examples/export_encoder.py $(OUT)/encoder.onnx
	$(BIN)/graphsub optimize $(OUT)/encoder.onnx -o $(OUT)/encoder_fast.onnx --budget 120 \
		--report $(OUT)/encoder_report.html

lint: $(STAMP)
	$(BIN)/ruff check src tests experiments tools examples docs
	$(BIN)/mypy

# the documentation site (docs/, mkdocs.yml) into site/; a warning fails the build
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir site

# the tests on every core (pytest-xdist; the Ray tests share one worker and its one cluster: loadgroup), without
# the slow ones (pyproject's addopts: -m 'not slow'); test-all runs those too (-m '' lifts the filter)
PYTEST_XDIST := -n auto --dist loadgroup

test: $(STAMP) lint docs
	$(BIN)/pytest $(PYTEST_XDIST)

test-all: $(STAMP) lint docs
	$(BIN)/pytest $(PYTEST_XDIST) -m ''

# the package as a wheel in dist/; wheel-smoke installs it alone (no extras) in a fresh venv and runs the CLI
wheel: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --wheel --outdir dist .

wheel-smoke: wheel
	rm -rf /tmp/graphsub-wheel-smoke && $(PYTHON) -m venv /tmp/graphsub-wheel-smoke/venv
	/tmp/graphsub-wheel-smoke/venv/bin/pip install --quiet --disable-pip-version-check dist/graphsub-*.whl
	cd /tmp/graphsub-wheel-smoke && venv/bin/graphsub --version && \
		venv/bin/graphsub optimize zoo:squeezenet -o x.onnx && venv/bin/graphsub verify zoo:squeezenet x.onnx

bench-ir: $(STAMP)
	$(BIN)/python experiments/infra/ir_micro.py

clean:
	rm -rf $(OUT) site dist build .pytest_cache .ruff_cache .mypy_cache
