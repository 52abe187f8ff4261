"""Experiment files: one TOML file describes a training run on an emulated fabric.

``load(path)`` reads and validates a file; ``parse(data, where)`` does the same for a dict
already read. Everything is checked before anything is built: unknown keys at any level,
wrong types, impossible values, missing required fields, contradicting options, and the
failure timeline against the fabric it will run on (a link that does not exist fails here,
not minutes later), and what this machine can hold (a batch larger than the training
set, a compute time no sleep can take, a name no directory can have: limits.py). Every
error is an :class:`emu.errors.EmuError` whose message names the file, the key path
(``workload.batch_size``), the bad value and what is valid.

A Python timeline (``timeline = "x.py"``) is code: one that only declares events is read
without running it, but any other runs, as root, when ``emu run`` starts (before the
fabric is built), with everything root can do. Name only scripts you trust.

Reference (every key; ``#`` gives the default, *required* marks the required ones)::

    name = "digits-mrc-linkcut"    # *required*, [A-Za-z0-9][A-Za-z0-9_.-]*, at most 239
                                   # bytes (it names results/NAME-YYYYmmdd-HHMMSS)
    description = "..."            # optional free text
    seed = 1                       # 0; repetition k uses seed + k
    repetitions = 1                # 1; >= 1; with several variants (emu run --transports)
                                   # they run interleaved on one fabric: repetition 0 of
                                   # every variant, then repetition 1, ...
    timeline = "../failures/spine_link_cut.py"  # optional failure timeline file (.py/.toml),
                                   # relative to this file, else to the working directory;
                                   # not together with [[event]]; a .py one is code that
                                   # may run as root (above)
    clock = "wall"                 # "wall" | "modelled": what an event's `at` counts.
                                   # wall: seconds on the wall clock from the start of
                                   # training; modelled: seconds of the training time the
                                   # run reports (modelled compute + exposed communication
                                   # per step; measured compute: the steps' time without
                                   # evaluation), the event firing at the first step
                                   # boundary that reached it, with every rank held there
                                   # until it is applied (record: step, train_s, late_ms).
                                   # Must stay "wall" with `at_step` events (it would
                                   # mean nothing there)

    [fabric]                       # the whole table is optional; defaults and bounds are
                                   # the topology's (MultiPlaneClos, its LinkSpec, DciSpec),
                                   # and their errors name these keys
    planes = 2                     # 2; [1, 16]
    spines = 4                     # 4; spines per plane, [1, 64]
    leaves = 4                     # 4; leaves (racks) per plane, [1, 64]
    hosts_per_leaf = 4             # 4; [1, 64]
    rate_mbit = 100.0              # 100.0; host links, in [0.01, 40000]
    fabric_rate_mbit = 100.0       # rate_mbit; leaf-spine links, in [0.01, 40000]
    queue_packets = 100            # 100; egress FIFO depth, in [1, 2**31 - 1]
    control_plane = "static"       # "static" | "bgp" (bgp: one DC only)
    dcs = 1                        # 1; > 1 makes a ScaleAcross of identical DCs
    dci_rate_mbit = 100.0          # 100.0; DCI links (used when dcs > 1)
    dci_delay_ms = 5.0             # 5.0 (DciSpec's); one-way DCI delay in [0, 1000]
                                   # (used when dcs > 1)
    dci_loss = 0.0                 # 0.0; DCI random loss in [0, 1] (used when dcs > 1)

    [transport]                    # optional
    name = "mrc"                   # "mrc" | "rc" | "dblp" | "gloo" (torch.distributed on TCP)
    collective = "ring"            # "ring" | "transpose" | "hierarchical"; default "ring",
                                   # "transpose" for dblp (the only one dblp takes);
                                   # hierarchical needs dcs > 1 and workers in >= 2 DCs;
                                   # gloo: "ring" only (its own all-reduce);
                                   # not allowed for pipelines (activations go point to point)

    [transport.mrc]                # the chosen transport's own table, optional; a table of
    rto_max = 1.0                  # another transport is refused. Any field of its settings
    selector = "bitmap"            # dataclass (transports/registry.py: MrcConfig, RcConfig,
    [transport.mrc.nscc]           # DblpCoreConfig, GlooConfig), each checked by its rule
    target_frac = 0.5              # (an unknown key lists the valid ones); defaults: the
                                   # registry's run defaults (rto_max = 2.0 for mrc, rc, dblp;
                                   # rc: aimd = true), the rest the dataclass's

    [transport.dblp]               # only with name = "dblp" (optional there): DBLP's
                                   # settings (as [transport.mrc]'s, close = "needed" |
                                   # "first_pass" and linger_s) and its tolerance policy:
    policy = "phase_aware"         # "phase_aware" | "fixed" | "optireduce"
    fill = "error_feedback"        # workloads.fill.FILLS
    tolerance = 0.05               # fixed only: 0.05; in [0, 1)
    base = 0.05                    # phase_aware only: every PhaseAwareConfig field
    cap = 0.2                      #   (base, cap, critical_epochs, window, eta, lr_scaling,
    critical_epochs = 2            #   epoch_steps), its defaults and checks;
    epoch_steps = 20               #   accuracy_gain and begin_accuracy are refused (no
                                   #   accuracy signal); epoch_steps: rounds per epoch
                                   #   of the critical period (default: the data's epoch)
    window = 10
    eta = 0.5
    deadline_ms = 50.0             # optional, > 0: every round's deadline (optireduce: the
                                   # first round's, later ones adapt)
    margin_ms = 1.0                # optireduce only: 1.0; >= 0
    bounded_gather = false         # false; true bounds the all-gather too: an entry that
                                   # does not arrive is estimated from the rank's own
                                   # gradient, so replicas may drift (see collectives.py)
                                   # Without a deadline, the model's smallest transpose
                                   # block must have enough chunks (8000 B) for the largest
                                   # tolerance (fixed: tolerance; phase_aware: cap, or base
                                   # with lr_scaling off or a constant LR) to let one go,
                                   # else DBLP would run as reliable MRC: refused, naming
                                   # that key (the digits CNN's blocks are 2 chunks: a
                                   # tolerance >= 0.5; blocks.py)

    [workload]                     # *required*
    kind = "data_parallel"         # "data_parallel" | "pipeline"
    model = "digits_cnn"           # *required*: "digits_cnn" | "tiny_lm"
    workers = 4                    # *required*: data_parallel >= 1, pipeline (stages) >= 2;
                                   # at most the fabric's hosts
    hosts = ["h0", "h3"]           # optional placement: distinct hosts, len == workers
    steps = 200                    # *required*, >= 1
    batch_size = 64                # 64; the global batch: divisible by workers (data_parallel)
                                   # or by microbatches (pipeline); at most the model's
                                   # training samples (digits_cnn 1437; tiny_lm about 38700,
                                   # from the installed scikit-learn's text)
    microbatches = 4               # pipeline only: 4; >= 1
    lr = 0.05                      # 0.05; > 0
    lr_schedule = "cosine"         # "cosine" | "constant"
    target_accuracy = 0.9          # digits_cnn only, optional: test accuracy in (0, 1]
    target_loss = 2.0              # tiny_lm only, optional: validation loss > 0
    eval_every = 10                # 10; steps between evaluations, >= 1
    compute = "measured"           # "measured" | "modelled"
    compute_ms = 20.0              # modelled only, optional (> 0, at most one hour of
                                   # compute per step): absent = calibrated on the
                                   # fabric before the runs, as in the run (a short run with
                                   # measured compute over each variant's transport: the
                                   # 99th percentile of the ranks' forward + backward x 2;
                                   # workloads/compute_model.py); pipelines: required, one
                                   # microbatch's forward + backward on one stage
    allow_overruns = false         # modelled only: false; a run in which the real compute
                                   # overran the model in more than 5 % of its steps (a step
                                   # overruns when any rank's does) ends with an error after
                                   # its results are written; true accepts it

    [[event]]                      # optional failure timeline, the emu/timeline.py TOML format;
    at = 5.0                       # seconds from the start of training (see `clock`), or
    # at_step = 40                 # instead: after training step 40, before step 41, on
                                   # every rank (an integer in [0, workload.steps - 2]);
                                   # one timeline uses one of the two for every event
    do = "fail_link"               # a verb of emu.timeline, its arguments as keys
    link = "p0l0-p0s1"
    id = "cut"                     # optional; a later event {do = "restore", id = "cut"}
                                   # undoes it (or do = "restore", what = "fail_link" and
                                   # the same arguments)

The default placement (``Experiment.hosts()``) spreads workers over DCs, then racks
(placement.py). ``with_overrides(exp, {"transport.name": "rc"})`` re-validates the
experiment with dotted keys replaced, ``parse_override("workload.steps=50")`` reads one
``KEY=VALUE`` (overrides.py).

The package, one module per job: config.py (the frozen dataclasses and vocabularies),
reader.py (the typed TOML table reader), tables.py (each table's rules), timeline.py (the
failure timeline, by emu.timeline's parser), limits.py (what this machine can hold),
blocks.py (DBLP's gradient blocks against its tolerance), placement.py, overrides.py,
and loading.py (``load``, ``parse``).
"""

from __future__ import annotations

from workloads.dblpconfig import POLICIES, DblpConfig
from workloads.experiment.config import (
    CLOCKS,
    COLLECTIVES,
    COMPUTE_MODES,
    CONTROL_PLANES,
    KINDS,
    LR_SCHEDULES,
    MAX_STAGES,
    MODELS,
    TRANSPORTS,
    Experiment,
    FabricConfig,
    TransportConfig,
    WorkloadConfig,
)
from workloads.experiment.loading import load, parse, parse_fabric
from workloads.experiment.overrides import parse_override, with_overrides
from workloads.experiment.placement import default_placement

__all__ = [
    "CLOCKS", "COLLECTIVES", "COMPUTE_MODES", "CONTROL_PLANES", "KINDS", "LR_SCHEDULES",
    "MAX_STAGES", "MODELS", "POLICIES", "TRANSPORTS", "DblpConfig", "Experiment",
    "FabricConfig", "TransportConfig", "WorkloadConfig", "default_placement", "load", "parse",
    "parse_fabric", "parse_override", "with_overrides",
]
