"""Every file the code names by a path from its own location is shipped where it says."""
from pathlib import Path

import pytest

from commands.bench.sweep import SWEEP_FILE
from commands.reproduce.explorer_live import EXPERIMENT
from commands.reproduce.spec import CLAIMS_DIR
from emu.launch import PROJECT_ROOT
from explorer.bench import GRID, REFERENCE
from workloads.training.demo import DEMO_FILE


@pytest.mark.parametrize("path", [DEMO_FILE, SWEEP_FILE, EXPERIMENT, GRID, REFERENCE],
                         ids=lambda p: p.name)
def test_a_named_experiment_file_exists(path: Path) -> None:
    assert path.is_file(), path


def test_claims_dir_and_project_root_are_the_checkout() -> None:
    root = Path(__file__).resolve().parents[2]
    assert PROJECT_ROOT == root
    assert CLAIMS_DIR == root / "experiments" / "reproduce" and CLAIMS_DIR.is_dir()
