# Megatron-C: `make` installs what is missing and builds; `make run` trains the demo;
# `make test` runs every test; `make fuzz` fuzzes every parser (FUZZ_SECONDS each, default
# 600; scripts/fuzz.sh).
BUILD ?= build
SHELL := /bin/bash
JOBS  ?= $(shell nproc)

.PHONY: all deps build run test fuzz bench clean
all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >$(BUILD).cmake.log 2>&1 || (cat $(BUILD).cmake.log; exit 1)
	@grep 'megatron-c:' $(BUILD).cmake.log | sed 's/^-- //'
	@cmake --build $(BUILD) -j $(JOBS)

# The demo needs the binary alone; without a GPU, without the CUDA kernels either (minutes
# of nvcc that a CPU run would not use).
HAVE_GPU  := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
RUN_BUILD := $(if $(HAVE_GPU),$(BUILD),$(BUILD)-cpu)
run: deps
	@cmake -S . -B $(RUN_BUILD) -DCMAKE_BUILD_TYPE=Release -DMC_WITH_CUDA=$(if $(HAVE_GPU),AUTO,OFF) \
		>$(RUN_BUILD).cmake.log 2>&1 || (cat $(RUN_BUILD).cmake.log; exit 1)
	@cmake --build $(RUN_BUILD) -j $(JOBS) --target megatron-c
	@scripts/run_demo.sh $(RUN_BUILD)

# ctest prints no reason for a skipped test: the reasons (each skip prints "SKIP: why")
# come after its run, then its summary line again, last, for whoever reads only that.
test: build
	@cd $(BUILD) && ctest --output-on-failure -j 1 | tee ctest.out; rc=$${PIPESTATUS[0]}; \
	if grep -q "(Skipped)" ctest.out; then \
		echo "Why the skipped tests skipped:"; \
		awk '/^[0-9]+\/[0-9]+ Testing: /{name=$$3} /^SKIP: /{print "  " name ": " substr($$0, 7)}' Testing/Temporary/LastTest.log; \
		grep -E "tests passed|tests failed out of" ctest.out | tail -1; \
	fi; exit $$rc

fuzz:
	@scripts/fuzz.sh

clean:
	rm -rf $(BUILD) $(BUILD).cmake.log $(BUILD)-cpu $(BUILD)-cpu.cmake.log build-fuzz build-fuzz.cmake.log build-fuzz.build.log
