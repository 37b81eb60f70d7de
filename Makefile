# User-facing verbs. `make demo` runs the whole pipeline at miniature scale; `make test` runs
# every test (Docker tests included when an engine is reachable). Both first run the bootstrap
# (host packages, Docker engine); `BOOTSTRAP=:` skips it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
APPLIANCE := $(PY) -m appliance
BOOTSTRAP ?= scripts/bootstrap.sh

.PHONY: bootstrap venv test lint demo bench fuzz

bootstrap:
	@$(BOOTSTRAP)

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

test: bootstrap
	@$(MAKE) --no-print-directory venv
	$(PY) -m pytest

lint: venv
	$(VENV)/bin/ruff check appliance tests fuzz
	$(VENV)/bin/mypy appliance fuzz

# Every reader (GGUF header, remote GGUF, trace, lock, profile, bundle) fed FUZZ_CASES mutated
# inputs each, in workers limited to 2 GiB and 2 s per case; a short run is part of `make test`.
FUZZ_CASES ?= 100000
FUZZ_SEED ?= 0
fuzz: venv
	$(PY) -m fuzz --cases $(FUZZ_CASES) --seed $(FUZZ_SEED)

demo: bootstrap
	@$(MAKE) --no-print-directory venv
	$(APPLIANCE) demo $(DEMO_ARGS)

# Reproductions: preflight (fails fast without the GPU or MODELS a target needs), engine image,
# the target's profiles, signed bundles, verification, verdicts against evidence/.
# GPU targets: make repro-sm120 MODELS=/path/to/ggufs
KEY_DIR := $(or $(XDG_CONFIG_HOME),$(HOME)/.config)/appliance/keys
.PHONY: repro-cpu repro-sm89 repro-sm120 signing-key
signing-key: venv
	@test -f $(KEY_DIR)/appliance-ed25519.key || $(APPLIANCE) keys init

repro-cpu: venv signing-key
	$(APPLIANCE) repro run cpu $(REPRO_ARGS)

repro-sm89 repro-sm120: repro-%: venv
	$(APPLIANCE) repro preflight $* $(if $(MODELS),--models $(MODELS),)
	$(MAKE) signing-key
	$(APPLIANCE) repro run $* $(if $(MODELS),--models $(MODELS),) $(REPRO_ARGS)

.PHONY: notices
notices: venv
	$(PY) -m appliance.release.notices --write

.PHONY: reference-plans
# Rebuild the header-only GGUFs of evidence/plans/*.input.json (under build/skeletons) and
# rewrite the unverified reference plans next to them.
reference-plans: venv
	$(PY) -m appliance.planner.reference_plans

# Attestation and evidence: what git tracks may be published; keys for signing bundles.
.PHONY: release-check
release-check: venv
	$(APPLIANCE) release-check --history
	$(APPLIANCE) evidence list

# Route replay speed against libCacheSim on the same requests (one core), and the
# one-pass LRU curve against 50 libCacheSim runs.
.PHONY: bench-replay
bench-replay: venv
	PYTHONPATH=. $(PY) -m bench.replay_bench

# Wall time of --help, engine show and the trace verbs against `python -c pass`.
.PHONY: bench-cli
bench-cli: venv
	PYTHONPATH=. $(PY) -m bench.cli_bench

# The cpu image's cold or reused build, a cache-hit rebuild, and a rebuild after a one-line
# patch change (ccache in a BuildKit cache mount).
.PHONY: bench-build
bench-build: venv
	PYTHONPATH=. $(PY) -m bench.build_bench

bench: bench-replay bench-cli

# The miniature sweep through --cluster on one Ray node and on two, both on this machine
# (a network namespace with only lo; needs root, Docker and the cpu engine image).
.PHONY: bench-cluster
bench-cluster: venv
	PYTHONPATH=. $(PY) -m bench.cluster_sweep --out $$(mktemp -d) $(BENCH_CLUSTER_ARGS)

# The llama.cpp patch series: bracket check, local engine build, cross-bracket trace equality,
# and the route-aware prefetch measurement (root, cgroup v1 memory controller).
.PHONY: patches-check engine-local bracket-trace prefetch-experiment
patches-check: venv
	$(APPLIANCE) patches check

engine-local: venv
	$(APPLIANCE) engine build --local --source b10229

bracket-trace: venv
	PYTHONPATH=. $(PY) -m tests.e2e.tracer_bracket

PREFETCH_LIMIT_MIB ?= 200
PREFETCH_REPEATS ?= 5
prefetch-experiment: venv
	bin=$$($(APPLIANCE) engine build --local --source b10229 --json | $(PY) -c 'import json,sys; print(json.load(sys.stdin)["bin_dir"])') && \
	model=$$(PYTHONPATH=. $(PY) -c 'from tests.models import tiny_model; print(tiny_model("qwen3moe", size="400MiB"))') && \
	patches/llama.cpp/measure-prefetch.sh $$bin $$model $(PREFETCH_LIMIT_MIB) $(PREFETCH_REPEATS) .cache/prefetch-experiment

# Engine images (issue 4). ENGINE_SOURCE: canonical, a stand-in (b10229, b10068) or a directory.
ENGINE_SOURCE ?= canonical
GPU_CHECK_SOURCE ?= $(if $(filter canonical,$(ENGINE_SOURCE)),b10229,$(ENGINE_SOURCE))
CUDA_VERSION ?= 13.0.2
JOBS ?= 2
.PHONY: image-base image-cpu image-sm89 image-sm120 check-gpu-images

image-base: venv
	$(APPLIANCE) image base --cuda $(CUDA_VERSION)

# ENGINE_SOURCE=canonical needs the upstream pin; where it cannot be fetched, use a stand-in.
image-cpu image-sm89 image-sm120: image-%: venv
	$(APPLIANCE) image build --target $* --source $(ENGINE_SOURCE) --jobs $(JOBS)

# Builds the cpu, sm89 and sm120 images (reused when unchanged) and checks the GPU images without
# a GPU: every program starts, every library resolves but the driver's, the CUDA backend module
# is there, and the tiny-model trace and text on the CPU are byte-identical to the cpu image's.
# Long when cold (see docs/images.md): run by hand when the Dockerfile, the lock or the patches
# change; not part of `make test`.
check-gpu-images: venv
	PYTHONPATH=. $(PY) -m tests.e2e.gpu_images --source $(GPU_CHECK_SOURCE) --jobs $(JOBS)
