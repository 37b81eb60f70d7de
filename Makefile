# User-facing verbs. `make` alone prints them (`make help`) and installs nothing. `make demo`
# runs the whole pipeline at miniature scale; `make test` runs every test (Docker tests included
# when an engine is reachable). Both first run the bootstrap (host packages, Docker engine);
# `BOOTSTRAP=:` skips it. A target's `## text` is its line in `make help`.
.DEFAULT_GOAL := help
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
APPLIANCE := $(PY) -m appliance
BOOTSTRAP ?= scripts/bootstrap.sh
# The trees `make lint` and tests/unit/test_lint.py check with ruff and the formatter.
LINT_TREES := appliance tests fuzz bench
# The GitHub workflows `make lint` checks with actionlint (shellcheck on their scripts) and audits
# with zizmor (offline, every audit); tests/unit/test_workflows.py runs the same two.
WORKFLOWS := .github/workflows/*.yml

.PHONY: help bootstrap venv test lint format demo demo-cache demo-prefill demo-gpu demo-gpu-slice scale bench fuzz

help: ## this list
	@awk -F ':.*## ' '/^[a-zA-Z0-9_ %-]+:.*## / {printf "  %-22s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

bootstrap: ## host packages and the Docker engine (may install packages as root)
	@$(BOOTSTRAP)

venv: $(VENV)/.installed ## .venv with the package and its test extras

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

test: bootstrap ## bootstrap, then unit, integration (Docker) and e2e tests
	@$(MAKE) --no-print-directory venv
	$(PY) -m pytest

lint: venv ## ruff, the formatter's check, mypy, and actionlint and zizmor on the workflows
	$(VENV)/bin/ruff check $(LINT_TREES)
	$(VENV)/bin/ruff format --check $(LINT_TREES)
	$(VENV)/bin/mypy appliance fuzz bench
	$(VENV)/bin/actionlint $(WORKFLOWS)
	$(VENV)/bin/zizmor --offline --persona pedantic $(WORKFLOWS)

format: venv ## rewrite the lint trees with the formatter
	$(VENV)/bin/ruff format $(LINT_TREES)

# Every reader (GGUF header, remote GGUF, trace, lock, profile, bundle, key, sidecar, trust store) fed FUZZ_CASES mutated
# inputs each, in workers limited to 2 GiB and 2 s per case; a short run is part of `make test`.
FUZZ_CASES ?= 100000
FUZZ_SEED ?= 0
fuzz: venv ## every reader fed FUZZ_CASES mutated inputs
	$(PY) -m fuzz --cases $(FUZZ_CASES) --seed $(FUZZ_SEED)

# Mutation testing (mutmut; configuration and test selection in pyproject.toml): mutants of
# the modules that decide verdicts or produce published figures, each run against the unit
# tests that call the mutated function; then the score per module (tests/mutation/score.py).
# Equivalent survivors, each with its reason: tests/mutation/equivalent.txt. Results are kept
# in mutants/ and reused for unchanged functions. MUTANTS: mutant names or globs to (re)run.
.PHONY: mutation
mutation: venv ## mutation score per module of the verdict and figure modules (mutmut; not in CI)
	$(VENV)/bin/mutmut run --max-children $(JOBS) $(MUTANTS)
	$(PY) -m tests.mutation.score

# The one-line bugs issue 26 names, each planted alone in a copy of the tree; each must make
# its tests fail (tests/mutation/plants.py). Not in CI: about a minute per plant.
.PHONY: plant-bugs
plant-bugs: venv ## plant each named one-line bug in a copy and require its tests to fail (not in CI)
	$(PY) -m tests.mutation.plants $(PLANTS)

demo: bootstrap ## the whole pipeline at miniature scale (bootstrap first)
	@$(MAKE) --no-print-directory venv
	$(APPLIANCE) demo $(DEMO_ARGS)

demo-cache: bootstrap ## the miniature sweep with the engine's expert cache (patch 0004)
	@$(MAKE) --no-print-directory venv
	$(APPLIANCE) demo --profile tiny-oversub-cache $(DEMO_ARGS)

demo-prefill: bootstrap ## the miniature sweep of a 534-token prompt: the prefill readers (patch 0006)
	@$(MAKE) --no-print-directory venv
	$(APPLIANCE) demo --profile tiny-oversub-prefill $(DEMO_ARGS)

demo-gpu: bootstrap ## the miniature sweep on the stand-in GPU (llama.cpp's RPC device): planned placement
	@$(MAKE) --no-print-directory venv
	$(APPLIANCE) demo --profile tiny-stand-in $(DEMO_ARGS)

demo-gpu-slice: bootstrap ## the GPU profile's shape on the stand-in: a 2.8 GB slice of the Qwen3.5 shape, routing forced, expert cache
	@$(MAKE) --no-print-directory venv
	$(APPLIANCE) demo --profile qwen35-shape-slice-stand-in $(DEMO_ARGS)

# The experiment at its own scale (not in CI: up to an hour, about 35 GB of disk for two
# synthesized models). It says first how long and how much disk; SCALE_ARGS=--dry-run stops there.
scale: bootstrap ## full-shape synthetics swept around 8 GiB on the cpu image (not in CI; up to an hour)
	@$(MAKE) --no-print-directory venv
	$(APPLIANCE) scale $(SCALE_ARGS)

# Reproductions: preflight (fails fast without the GPU or MODELS a target needs), engine image,
# the target's profiles, signed bundles, verification, verdicts against evidence/.
# GPU targets: make repro-sm120 MODELS=/path/to/ggufs
.PHONY: repro-cpu repro-sm89 repro-sm120 signing-key
signing-key: venv ## the bundle signing key, made once (appliance keys init --if-missing)
	@$(APPLIANCE) keys init --if-missing

repro-cpu: venv signing-key ## reproduce the cpu target's evidence
	$(APPLIANCE) repro run cpu $(REPRO_ARGS)

repro-sm89 repro-sm120: repro-%: venv ## reproduce a GPU target's evidence (MODELS=DIR)
	$(APPLIANCE) repro preflight $* $(if $(MODELS),--models $(MODELS),)
	$(MAKE) signing-key
	$(APPLIANCE) repro run $* $(if $(MODELS),--models $(MODELS),) $(REPRO_ARGS)

.PHONY: notices
notices: venv ## rewrite THIRD_PARTY_NOTICES.md
	$(PY) -m appliance.release.notices --write

.PHONY: reference-plans
# Rebuild the header-only GGUFs of evidence/plans/*.input.json (under build/skeletons) and
# rewrite the unverified reference plans next to them.
reference-plans: venv ## rebuild the reference plans of evidence/plans
	$(PY) -m appliance.planner.reference_plans

# Attestation and evidence: what git tracks may be published; keys for signing bundles.
.PHONY: release-check
release-check: venv ## what git tracks may be published (history included)
	$(APPLIANCE) release-check --history
	$(APPLIANCE) evidence list

# Route replay speed against libCacheSim on the same requests (one core), replay memory
# against the trace file's size (100k tokens, 40 x 256 x 8; goals 2x and 2x,
# docs/trace-format.md), and the one-pass LRU curve against 10 libCacheSim runs.
.PHONY: bench-replay
bench-replay: venv ## route replay speed and memory against libCacheSim
	PYTHONPATH=. $(PY) -m bench.replay_bench

# Wall time of --help, engine show and the trace verbs against `python -c pass`.
.PHONY: bench-cli
bench-cli: venv ## wall time of the CLI's quick verbs
	PYTHONPATH=. $(PY) -m bench.cli_bench

# The cpu image's cold or reused build, a cache-hit rebuild, and a rebuild after a one-line
# patch change (ccache in a BuildKit cache mount).
.PHONY: bench-build
bench-build: venv ## the cpu image's build times
	PYTHONPATH=. $(PY) -m bench.build_bench

bench: bench-replay bench-cli ## bench-replay and bench-cli

# The engine's expert cache (experimental patch 0004) at the miniature's scale: local build,
# trials in memory cgroups on this host (root), measured reads against each policy's replay.
BENCH_CACHE_ARGS ?=
.PHONY: bench-expert-cache
bench-expert-cache: venv
	PYTHONPATH=. $(PY) -m bench.expert_cache --out $$(mktemp -d) $(BENCH_CACHE_ARGS)

# The miniature sweep through --cluster on one Ray node and on two, both on this machine
# (a network namespace with only lo; needs root, Docker and the cpu engine image).
.PHONY: bench-cluster
bench-cluster: venv ## the miniature sweep on one and two local Ray nodes (root)
	PYTHONPATH=. $(PY) -m bench.cluster_sweep --out $$(mktemp -d) $(BENCH_CLUSTER_ARGS)

# The llama.cpp patch series: bracket check, local engine build, cross-bracket trace equality,
# and the route-aware prefetch measurement (root, cgroup v1 memory controller).
.PHONY: patches-check engine-local bracket-trace prefetch-experiment
patches-check: venv ## the patch series against both bracket stand-ins
	$(APPLIANCE) patches check

engine-local: venv ## a local engine build from stand-in b10229
	$(APPLIANCE) engine build --local --source b10229

bracket-trace: venv ## route traces equal across the bracket
	PYTHONPATH=. $(PY) -m tests.e2e.tracer_bracket

PREFETCH_LIMIT_MIB ?= 200
PREFETCH_REPEATS ?= 5
prefetch-experiment: venv ## the route-aware prefetch measurement (root, cgroup v1)
	bin=$$($(APPLIANCE) engine build --local --source b10229 --json | $(PY) -c 'import json,sys; print(json.load(sys.stdin)["bin_dir"])') && \
	model=$$(PYTHONPATH=. $(PY) -c 'from tests.models import tiny_model; print(tiny_model("qwen3moe", size="400MiB"))') && \
	patches/llama.cpp/measure-prefetch.sh $$bin $$model $(PREFETCH_LIMIT_MIB) $(PREFETCH_REPEATS) .cache/prefetch-experiment

# Engine images (issue 4). ENGINE_SOURCE: canonical, a stand-in (b10229, b10068) or a directory.
ENGINE_SOURCE ?= canonical
GPU_CHECK_SOURCE ?= $(if $(filter canonical,$(ENGINE_SOURCE)),b10229,$(ENGINE_SOURCE))
CUDA_VERSION ?= 13.0.2
JOBS ?= 2
.PHONY: image-base image-cpu image-sm89 image-sm120 check-gpu-images

image-base: venv ## the registry-free base images, the CUDA ones too (CUDA_VERSION)
	$(APPLIANCE) image base --cuda $(CUDA_VERSION)

# ENGINE_SOURCE=canonical needs the upstream pin; where it cannot be fetched, use a stand-in.
image-cpu image-sm89 image-sm120: image-%: venv ## an engine image (ENGINE_SOURCE, JOBS)
	$(APPLIANCE) image build --target $* --source $(ENGINE_SOURCE) --jobs $(JOBS)

# Builds the cpu, sm89 and sm120 images (reused when unchanged) and checks the GPU images without
# a GPU: every program starts, every library resolves but the driver's, the CUDA backend module
# is there, and the tiny-model trace and text on the CPU are byte-identical to the cpu image's.
# Long when cold (see docs/images.md): run by hand when the Dockerfile, the lock or the patches
# change; not part of `make test`.
check-gpu-images: venv ## build sm89 and sm120 and check them without a GPU (long; by hand)
	PYTHONPATH=. $(PY) -m tests.e2e.gpu_images --source $(GPU_CHECK_SOURCE) --jobs $(JOBS)
