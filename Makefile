# One entry point for people and CI. `make demo` runs the main job end to end; `make test` runs
# everything CI checks. Both create the virtual environment they need on first use: `make demo` installs only
# what the demo runs (requirements-demo.txt: runtime dependencies, ansible-core, the simulator); every other
# target adds the test and development tooling (requirements-test.txt) to the same venv. One stamp each.
PYTHON ?= python3
VENV ?= $(CURDIR)/.venv
BIN := $(VENV)/bin
DEMO_STAMP := $(VENV)/.installed-demo
STAMP := $(VENV)/.installed-test

export PATH := $(BIN):$(PATH)
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/build/collections

.PHONY: setup setup-demo demo test test-dynamic test-static typecheck pytest lint acceptance-vm acceptance-container docs docs-check sanity artifact oldest-core acceptance collection-link clean

setup: $(STAMP) collection-link

setup-demo: $(DEMO_STAMP) collection-link

$(DEMO_STAMP): requirements.txt requirements-demo.txt tools/pvesim/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements-demo.txt ./tools/pvesim
	touch $@

$(STAMP): $(DEMO_STAMP) requirements-test.txt
	@# the simulator again, editable: its tests and the suite run the checkout's code
	$(BIN)/python -m pip install -q -r requirements-test.txt -e ./tools/pvesim
	touch $@

# ansible finds this checkout as the vmanyware.proxmox collection through a symlink.
collection-link:
	@mkdir -p build/collections/ansible_collections/vmanyware
	@test "$$(readlink build/collections/ansible_collections/vmanyware/proxmox)" = "$(CURDIR)" \
	  || ln -sfn $(CURDIR) build/collections/ansible_collections/vmanyware/proxmox

demo: setup-demo
	VENV=$(VENV) tools/dev/demo.sh

# Two sequential lanes side by side (2 cores), about equally long: the simulator-backed suite (about 22 minutes) and
# the oldest core's lane; and the static checks, the real-guest and real-container acceptance (mostly one TCG vCPU or
# one container each) and the 2.20 and newest cores' lanes. Rebalanced when the real-container part grew.
# Output is synchronised per line (both lanes show progress); a failing lane fails `make test`.
test: setup
	$(MAKE) --no-print-directory -j2 --output-sync=line test-dynamic test-static

test-dynamic:
	set -e; for part in pytest core-2.18; do $(MAKE) --no-print-directory $$part; done

test-static:
	set -e; for part in format-check typecheck acceptance-vm acceptance-container lint docs-check sanity artifact core-2.20 core-2.21; do $(MAKE) --no-print-directory $$part; done

# One formatter for every Python file (ruff format, ruff.toml: 120 columns); CI checks that nothing would change.
format: setup
	$(BIN)/ruff format .

format-check: setup
	$(BIN)/ruff format --check --diff .

# mypy --strict on plugins/module_utils (mypy.ini), imported through build/collections as ansible does,
# and on the unit tests' fake client, which must implement the client's Protocol.
typecheck: setup
	$(BIN)/python -m mypy -p ansible_collections.vmanyware.proxmox.plugins.module_utils
	$(BIN)/python -m mypy tests/unit/plugins/module_utils/pve_fake.py

pytest: setup
	$(BIN)/python -m pytest -q --durations=15

lint: setup
	$(BIN)/ansible-lint --profile production

# Module, filter and role reference pages (docs/reference) from their embedded documentation.
docs: setup
	VENV=$(VENV) tools/dev/build_docs.sh

docs-check: setup
	VENV=$(VENV) tools/dev/build_docs.sh --check

sanity: setup
	VENV=$(VENV) tools/dev/sanity.sh

# The built tarball installed into a fresh collections path: ansible-doc for every module, the plan playbook.
artifact: setup
	VENV=$(VENV) tools/dev/artifact.sh

# The support matrix (README.md): one target per ansible-core row besides the development venv's 2.19, each in a venv of its
# own (.venv-core-<minor>, tools/dev/core_lane.sh). 2.18 (the oldest, Python 3.11) and 2.20 (Python 3.12): the unit tests,
# the in-process action test and the built-tarball check; 2.21 (the newest on PyPI, Python 3.13 from pyenv) also the
# simulator integration suite and the demo.
.PHONY: matrix core-2.18 core-2.20 core-2.21
matrix: core-2.18 core-2.20 core-2.21

core-2.18 core-2.20: core-%: collection-link
	tools/dev/core_lane.sh $* unit artifact

core-2.21: collection-link
	tools/dev/core_lane.sh 2.21 unit integration demo artifact

oldest-core: core-2.18

# The provision playbook end to end on a real QEMU guest (pvesim --guests real) and on a real LXC container
# (pvesim --containers real); installs QEMU, lxc and mmdebstrap with apt when missing and builds (or reuses)
# the cached Debian guest image and container root file system.
acceptance: setup
	VENV=$(VENV) tools/dev/acceptance.sh

acceptance-vm acceptance-container: acceptance-%: setup
	ACCEPTANCE_PARTS=$* VENV=$(VENV) tools/dev/acceptance.sh

clean:
	rm -rf build .pytest_cache
