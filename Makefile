# Entry points for newcomers and CI. The build itself is CMake + Ninja.
#   make demo    install dependencies, build, import the bundled GPT-2 model
#                and split it for 2 devices, printing the plan
#   make check   build and run every test (lit + FileCheck + GoogleTest)

BUILD ?= build
JOBS ?= 2
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

APT_PACKAGES := cmake ninja-build g++ python3 strace \
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools \
  libonnx-dev libprotobuf-dev protobuf-compiler libonnx-testdata \
  libgtest-dev libopenmpi-dev openmpi-bin
PIP_PACKAGES := -r requirements.txt

.PHONY: deps build demo check clean

deps:
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(APT_PACKAGES)
	python3 -m pip install -q $(PIP_PACKAGES)

$(BUILD)/build.ninja:
	cmake -G Ninja -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release \
	  -DPython3_EXECUTABLE=$$(command -v python3)

build: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

demo: deps build
	$(BUILD)/bin/tp-translate --import-onnx test/models/gpt2/model.onnx \
	  --input-shape input_ids=2x16 -mlir-print-debuginfo -o $(BUILD)/gpt2.mlir
	$(BUILD)/bin/tp-opt $(BUILD)/gpt2.mlir --tp-model-summary -o /dev/null
	$(BUILD)/bin/tp-opt $(BUILD)/gpt2.mlir --tp-parallelize=devices=2 \
	  --tp-explain -o $(BUILD)/gpt2.tp2.mlir
	@echo "imported IR: $(BUILD)/gpt2.mlir; per-rank program for 2 devices: $(BUILD)/gpt2.tp2.mlir"

check: build
	cmake --build $(BUILD) -j $(JOBS) --target check-tp

clean:
	rm -rf $(BUILD)
