# Megatron-C: `make` installs what is missing and builds; `make run` trains the demo;
# `make test` runs every test; `make fuzz` fuzzes every parser (FUZZ_SECONDS each, default
# 600; scripts/fuzz.sh).
BUILD ?= build
JOBS  ?= $(shell nproc)

.PHONY: all deps build run test fuzz bench clean
all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >$(BUILD).cmake.log 2>&1 || (cat $(BUILD).cmake.log; exit 1)
	@grep 'megatron-c:' $(BUILD).cmake.log | sed 's/^-- //'
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	@scripts/run_demo.sh $(BUILD)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j 1

fuzz:
	@scripts/fuzz.sh

clean:
	rm -rf $(BUILD) $(BUILD).cmake.log build-fuzz build-fuzz.cmake.log build-fuzz.build.log
