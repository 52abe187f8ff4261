"""`emu sweep`: a grid of experiments over a Ray cluster, one fabric per node at a time.

A sweep file (``experiments/sweeps/*.toml``) names a base experiment and what varies::

    name = "hier-vs-ring-dci"      # *required*, the rule of experiment names; names
                                   # results/sweep-NAME-YYYYmmdd-HHMMSS
    description = "..."            # optional free text
    base = "../training/digits_hier_2dc.toml"   # *required*: the experiment every point
                                   # starts from, relative to this file, else to the
                                   # working directory
    seeds = [1, 2, 3]              # optional: an axis over the experiment's `seed`
    repetitions = 3                # optional: every point's `repetitions` (run on one
                                   # fabric by one task, as `emu run` does; the table's
                                   # median and spread are over them); default the base's
    retries = 1                    # 1; a point whose run fails (or whose node dies) is run
                                   # again up to this many times, in [0, 10]

    [set]                          # optional: overrides of every point (`emu run --set`)
    "workload.steps" = 50

    [axes]                         # experiment key = [values]: the grid is their product
    "fabric.dci_delay_ms" = [1.0, 5.0, 20.0]     # (the first axis varies slowest; seeds
    "transport.collective" = ["ring", "hierarchical"]   # last); [axes.fabric] tables
                                   # with plain keys read the same as quoted dotted keys

    [quick]                        # optional: overrides `--quick` adds after [set] (an
    "workload.steps" = 20          # axis still wins); --quick also runs 1 repetition

Keys are the experiment file's (workloads/experiment/__init__.py), dotted; ``name`` and
``repetitions`` are refused in [set], [axes] and [quick]. Every point is validated by the
experiment's own checks before anything runs: an error names the point (index and axis
values) and the key. Two points that resolve to the same experiment are refused.

The package, one module per job: sweepfile.py (reading a sweep file), grid.py (points,
stable ids), task.py (one point on its node: what crosses, what comes back), store.py
(the output directory, resume), cluster.py (starting or joining Ray), scheduler.py
(tasks, retries, progress, Ctrl-C), aggregate.py (table, plots, merged calibration),
run.py (the whole sweep), bench.py (`emu bench sweep`), command.py (`emu sweep`).
"""
