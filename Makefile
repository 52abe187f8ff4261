# scaleacross-emu. Every target that runs the emulator needs root (sudo make ...).
VENV := .venv
EMU  := $(VENV)/bin/emu

.PHONY: setup demo test bench clean lint

setup:
	bash scripts/setup.sh

demo: setup
	$(EMU) demo

test: setup
	bash scripts/test.sh

bench: setup
	$(EMU) bench fabric --json

clean: setup
	$(EMU) clean

lint: setup
	$(VENV)/bin/ruff check .
