# The two README commands: `make demo` (main job) and `make test` (every test).
BUILD      ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
# Seconds of fuzzing per fuzz/ target in `make fuzz` (7 targets: about 2.5 min at 20 s).
FUZZ_SECONDS ?= 20
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=
# The Python package is built and tested with the venv scripts/install-deps.sh makes.
PYTHON_ARGS = -DPython3_EXECUTABLE=$(abspath .venv)/bin/python
# Every ctest run of `make test` writes a JUnit file (whole output of passed tests too) that
# scripts/test-skips.py reads for the skipped tests and cases: junit RUN writes
# <dir>/Testing/junit-RUN.xml (a stale one removed first).
junit = --test-output-size-passed 8388608 --output-junit $(abspath $(1))/Testing/junit-$(2).xml
SKIP_RUNS = release=$(BUILD)/Testing/junit-release.xml gpu-fake=$(BUILD)/Testing/junit-gpu-fake.xml \
	asan=$(ASAN_BUILD)/Testing/junit-asan.xml tsan=$(TSAN_BUILD)/Testing/junit-tsan.xml

.PHONY: all deps build demo test test-release test-asan test-tsan fuzz format clean test-engines \
	test-mooncake-suite test-chaos

all: build

deps:
	./scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) -G Ninja -DEGM_WERROR=ON $(PYTHON_ARGS) $(CMAKE_ARGS)
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	./$(BUILD)/bin/egmstore demo

test-release: build
	rm -f $(BUILD)/Testing/junit-release.xml $(BUILD)/Testing/junit-gpu-fake.xml
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) --timeout 600 $(call junit,$(BUILD),release)
	@echo "== the GPU suite again, on the fake CUDA driver (tests/fake_libcuda): logic only, no GPU;"
	@echo "== every GPU test must run here: EGM_REQUIRE_GPU_RUN=1 makes a skip (exit 77) a failure"
	LD_LIBRARY_PATH=$(abspath $(BUILD))/fake-cuda EGM_FAKE_CUDA_FABRIC=0 EGM_REQUIRE_GPU_RUN=1 \
		ctest --test-dir $(BUILD) --output-on-failure --timeout 600 -L gpu $(call junit,$(BUILD),gpu-fake)
	python3 scripts/test-skips.py --forbid-skips gpu-fake=$(BUILD)/Testing/junit-gpu-fake.xml

test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DEGM_WERROR=ON -DEGM_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug $(PYTHON_ARGS) $(CMAKE_ARGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	rm -f $(ASAN_BUILD)/Testing/junit-asan.xml
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS) --timeout 900 -L 'unit|integration|fuzz' \
		$(call junit,$(ASAN_BUILD),asan)

# ThreadSanitizer over the concurrent modules only (ctest label `tsan`: the master's RPC threads,
# index shards and locks, the RPC server, the reactor, the master's integration tests): a few
# minutes. halt_on_error: the first race report fails its test (a child process exits 66).
test-tsan: deps
	cmake -S . -B $(TSAN_BUILD) -G Ninja -DEGM_WERROR=ON -DEGM_TSAN=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS)
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target egm_tsan_tests
	rm -f $(TSAN_BUILD)/Testing/junit-tsan.xml
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(abspath scripts/tsan.supp)" \
		ctest --test-dir $(TSAN_BUILD) --output-on-failure -j $(JOBS) --timeout 900 -L tsan \
		$(call junit,$(TSAN_BUILD),tsan)

# libFuzzer over every fuzz/ target for FUZZ_SECONDS each, from fuzz/corpus and fuzz/regressions
# (clang build in FUZZ_BUILD); fails on any crash. Prints the executions per target.
fuzz: deps
	EGM_FUZZ_BUILD=$(FUZZ_BUILD) JOBS=$(JOBS) ./fuzz/run.sh $(FUZZ_SECONDS)

format:
	./scripts/check-format.sh

# Ends with the table of what was skipped, by run, test, case and reason (scripts/test-skips.py).
test: deps format test-release test-asan test-tsan fuzz
	@python3 scripts/test-skips.py $(SKIP_RUNS)

# Opt-in, the long run of the HA chaos test (`make test` runs it for about 75 s of faults):
# CHAOS_SECONDS of leader, provider, standby and etcd member kills under the reference model
# (tests/integration/test_ha_chaos.c), then a full restart. Its summary line starts "ha chaos:".
CHAOS_SECONDS ?= 300
test-chaos: build
	EGM_TEST_BINARY=$(abspath $(BUILD))/bin/egmstore EGM_CHAOS_SECONDS=$(CHAOS_SECONDS) \
		CMOCKA_MESSAGE_OUTPUT=stdout $(BUILD)/tests/integration_test_ha_chaos

# Opt-in, not part of `make test`: vLLM, SGLang and LMCache (tests/engines/requirements-*.txt),
# their Mooncake store code unmodified, against a real master and provider of this build through
# the mooncake.store stand-in (docs/testing.md). The venv ENGINES_VENV (about 10 GB: torch from
# PyPI) is made once and reused while the requirement files are unchanged. Needs a configured
# BUILD (`make build` once); brings its command and Python package up to date.
ENGINES_VENV ?= .venv-engines
test-engines:
	@test -f $(BUILD)/build.ninja || { echo "no build in $(BUILD): run make build first" >&2; exit 2; }
	cmake --build $(BUILD) -j $(JOBS) --target egmstore_cli egm_python_ext egm_python_sources
	./scripts/engines-venv.sh $(ENGINES_VENV)
	cp $(BUILD)/python/egmstore_mooncake.pth \
		"$$($(ENGINES_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/"
	EGM_BUILD=$(abspath $(BUILD)) PYTHONPATH=$(abspath $(BUILD))/python EGMSTORE_AS_MOONCAKE=1 \
		$(ENGINES_VENV)/bin/python -m pytest -v -p no:cacheprovider -W ignore::DeprecationWarning \
		tests/engines

# Opt-in, not part of `make test`: Mooncake's own Python store tests
# (mooncake-wheel/tests/test_distributed_object_store.py and
# test_replicated_distributed_object_store.py), unmodified, against an egmstore master of this
# build through the mooncake.store stand-in (docs/mooncake-compat.md). The tests come from
# MOONCAKE_SRC (a Mooncake checkout or git directory) or, unset, a `git clone --depth 1` of
# Mooncake's repository at test time: it fails, saying so, when neither can be had.
# SUITE_AGAINST=mooncake runs the same against the real Mooncake of .venv (the baseline).
# The venv MCSUITE_VENV (pytest only, no Mooncake) is made once and reused.
MCSUITE_VENV ?= .venv-mcsuite
test-mooncake-suite:
	@test -f $(BUILD)/build.ninja || { echo "no build in $(BUILD): run make build first" >&2; exit 2; }
	cmake --build $(BUILD) -j $(JOBS) --target egmstore_cli egm_python_ext egm_python_sources
	./scripts/mooncake-suite.sh $(BUILD) $(MCSUITE_VENV)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)
