"""The `emu` command line."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

from commands.reproduce.command import configure as configure_reproduce
from commands.sweep.command import configure as configure_sweep
from emu import interrupts
from emu.errors import EmuError
from explorer.command import configure_parser as configure_explore
from explorer.spec import SpecError
from topologies import DciSpec, LinkSpec, MultiPlaneClos, ScaleAcross, TopologyError

_DCI = DciSpec()  # the DCI defaults `emu fabric` offers are DciSpec's own


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def install_stop_handlers() -> None:
    """Ctrl-C, SIGTERM and SIGHUP unwind alike (``emu.interrupts``). Called again by
    whatever replaced the handlers (Ray installs its own)."""
    interrupts.install()


def _spec(args: argparse.Namespace) -> MultiPlaneClos | ScaleAcross:
    dcs = tuple(MultiPlaneClos(
        planes=args.planes, spines=args.spines, leaves=args.leaves,
        hosts_per_leaf=args.hosts_per_leaf,
        host_link=LinkSpec(args.rate, args.queue),
        fabric_link=LinkSpec(args.fabric_rate if args.fabric_rate is not None else args.rate,
                             args.queue),
        dc=d) for d in range(args.dcs))
    if args.dcs == 1:
        return dcs[0]
    return ScaleAcross(dcs, DciSpec(rate_mbit=args.dci_rate, delay_ms=args.dci_delay_ms,
                                    loss=args.dci_loss))


def cmd_doctor(args: argparse.Namespace) -> int:
    from emu import doctor

    caps = doctor.check()
    print(doctor.report(caps, args.json))
    essential = {"root", "mininet", "namespaces", "veth", "seg6", "htb"}
    return 0 if all(c.available for c in caps if c.name in essential) else 1


def cmd_fabric(args: argparse.Namespace) -> int:
    from emu import timeline as tl
    from emu.capture import Capture, capture_point
    from emu.fabric import Fabric

    spec = _spec(args)
    events = None
    if args.timeline:
        # The timeline's own parser and checks, as for an experiment's timeline; a .py
        # script runs here (the user asked for a run).
        events = tl.load(args.timeline)
        if events.by_step:
            raise EmuError(f"{args.timeline}: events scheduled by training step (at_step) "
                           "need a training run: use `emu run` with an experiment file")
        try:
            events.validate(spec)  # before anything is built
        except EmuError as e:
            raise EmuError(f"{args.timeline}: {e}") from None
    points = [capture_point(spec, where) for where in args.capture or []]  # before building
    with Fabric(spec, name=args.name, progress=_progress, control_plane=args.control_plane,
                bfd=_bfd(args), delay_backend=args.delay_backend) as fab:
        bt = fab.build_times
        assert bt is not None  # set by the build that entering the Fabric ran
        print(f"fabric {args.name!r} up: {len(spec.nodes)} namespaces, {len(spec.links)} links, "
              f"{sum(len(p.routes) for p in fab.plans.values())} routes in {bt.total:.2f} s")
        if fab.delay_backend_used:
            assert isinstance(spec, ScaleAcross)  # only DCI links get a delay backend
            print(f"  DCI links: {spec.dci.delay_ms:g} ms one way via "
                  f"{fab.delay_backend_used} delay")
        first, last = spec.hosts[0].name, spec.hosts[-1].name
        print(f"  try: ip netns exec {fab.netns(first)} ping -c1 {spec.address(last)}")
        captures = []
        for node, ifname in points:
            path = Path(args.capture_dir) / f"{node}-{ifname}.pcap"
            path.parent.mkdir(parents=True, exist_ok=True)
            captures.append(Capture(fab, node, ifname, path))
            captures[-1].start()
            print(f"  capturing {node}:{ifname} -> {path} "
                  "(decode: transports.core.scapy_layer.read_pcap)")
        runner = None
        if events is not None:
            from emu import convergence

            runner = tl.TimelineRunner(fab, events, lambda rec: print(json.dumps(rec), flush=True),
                                       after_apply=lambda f: convergence.measure(fab, f))
            print(f"  timeline {args.timeline}: {len(events.events)} events over "
                  f"{events.duration:g} s (one JSON line per event as it fires)")
            runner.start()
        try:
            if args.cli:
                from mininet.cli import CLI

                CLI(fab.net)
            elif runner is not None and not args.hold:
                runner.join()
            else:
                print("  Ctrl-C tears it down")
                while True:
                    time.sleep(3600)
        finally:
            if runner is not None:
                runner.stop()
            for cap in captures:
                cap.stop()
    return 0


def _bfd(args: argparse.Namespace):
    from emu.frr import BfdTimers

    return BfdTimers(detect_multiplier=args.bfd_multiplier, receive_ms=args.bfd_ms,
                     transmit_ms=args.bfd_ms)


def cmd_clean(args: argparse.Namespace) -> int:
    from emu import registry
    from emu.errors import require_root

    require_root("emu clean")
    r = registry.clean(force=args.force)
    if r.empty and not r.skipped_running:
        print("nothing to clean")
    else:
        print(f"removed: fabrics {r.fabrics or '-'}, {r.processes} processes, "
              f"{len(r.namespaces)} namespaces, {len(r.tmpdirs)} temp dirs")
        for s in r.left:
            print(f"left: fabric {s}; its record is kept for the next `emu clean`")
    for s in r.skipped_running:
        print(f"left running: fabric {s} (its owner is alive; --force removes it)")
    if r.stuck:
        print(f"could not remove {len(r.stuck)} namespace names:", file=sys.stderr)
        for s in r.stuck:
            print(f"  {s}", file=sys.stderr)
        print(f"  {registry.STUCK_HINT}", file=sys.stderr)
        return 1
    return 0


def _out_dir(args: argparse.Namespace, stem: str, what: str) -> Path:
    """The command's results directory, made only once it is known the command can run:
    root is checked first, so a refused command leaves no directory behind."""
    from emu import safefs
    from emu.errors import require_root

    require_root(what)
    return safefs.results_dir(args.out, stem, force=args.force)


def cmd_demo(args: argparse.Namespace) -> int:
    if args.paths:
        from emu.demo import run_demo

        out = _out_dir(args, "paths", "emu demo --paths")
        res = run_demo(out, seconds=args.seconds, say=_progress)
        return 0 if all(c["ok"] for c in res["path_checks"]) else 1
    from workloads.training.demo import run_training_demo

    out = _out_dir(args, "demo", "emu demo")
    run_training_demo(out, say=_progress, steps=args.steps, ablation=args.ablation)
    print(f"results: {out}/ (results.jsonl, steps.csv, job_steps.csv, evals.csv, events.csv, "
          "calibration.json, time_to_accuracy.png, step_timeline.png)")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from workloads import experiment
    from workloads.training.runner import run_experiment

    if args.keys:
        from workloads.experiment.reference import describe_keys

        print(describe_keys())
        return 0
    if not args.file:
        raise EmuError("emu run needs an experiment file (or --keys to list its keys)")
    exp = experiment.load(args.file)
    if args.set:
        exp = experiment.with_overrides(exp, dict(experiment.parse_override(a) for a in args.set))
    variants = None
    if args.transports and args.systems:
        raise EmuError("--transports and --systems are exclusive: name systems only")
    if args.transports:
        names = [t.strip() for t in args.transports.split(",") if t.strip()]
        variants = [(n, {"transport.name": n}) for n in names]
    if args.systems:
        from workloads.systems import system

        try:
            variants = [(n, system(n.strip()).overrides())
                        for n in args.systems.split(",") if n.strip()]
        except ValueError as e:
            raise EmuError(f"--systems: {e}") from None
    for _, ov in variants or ():  # validate every variant before anything is built
        experiment.with_overrides(exp, ov)
    # A Python timeline that does more than declare events runs here, as root, the first
    # time its events are asked for: now, so its errors come before anything is built.
    _ = exp.events
    from emu.capture import capture_point

    for where in args.capture or ():  # checked before the results directory exists
        capture_point(exp.fabric_spec(), where)
    out = _out_dir(args, exp.name, "emu run")
    _progress(f"emu run {args.file}: results in {out}/")
    run_experiment(exp, out, say=_progress, variants=variants, captures=args.capture or ())
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from commands.bench.run import run_bench
    from workloads.provenance import host_info, software_versions

    host_before = host_info()  # the machine's speed before and after: see cpu_reference
    res = run_bench(args.bench, getattr(args, "quick", False), _progress,
                    lambda: _out_dir(args, "bench-training", "emu bench training"),
                    lambda: _bfd(args))
    # which code on which machine: a bench's figures are comparable only with others
    # measured on the same machine at the same speed
    res["provenance"] = {"versions": software_versions(), "host_before": host_before,
                         "host_after": host_info()}
    if args.json:
        print(json.dumps(res, indent=2))
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from emu import safefs
    from emu.errors import require_root
    from workloads.calibration.calibrate import calibrate

    names = tuple(t.strip() for t in args.transports.split(",") if t.strip())
    require_root("emu calibrate")
    if args.out:
        out = Path(args.out)
        if (out.exists() or out.is_symlink()) and not args.force:
            raise EmuError(f"--out {str(out)!r} already exists: choose a new path, or pass "
                           "--force to replace it")
    else:
        out = safefs.results_dir(None, "calibrate") / "calibration.json"
    rec = calibrate(out, quick=args.quick, transports=names, say=_progress,
                    training_results=Path(args.training_results) if args.training_results
                    else None)
    if args.json:
        print(json.dumps(rec, indent=2))
    return 0


def cmd_explore(args: argparse.Namespace) -> int:
    from explorer.command import run

    return run(args)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `emu` (exposed for tests and docs)."""
    p = argparse.ArgumentParser(prog="emu", description="scaleacross-emu: emulated multi-plane "
                                "Clos fabrics with SRv6 source routing")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    p.add_argument("--timeout-scale", metavar="X", default=None,
                   help="wait X times longer (1-1000) for processes, routes and ports to get "
                        "ready, on a machine much slower than normal (e.g. a VM under "
                        "software emulation); sets SAE_TIMEOUT_SCALE for every child. "
                        "Measured times and deadlines do not scale")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("doctor", help="probe kernel capabilities and what the emulator uses")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=cmd_doctor)

    f = sub.add_parser("fabric", help="build a fabric and hold it (or open Mininet's CLI)")
    dflt = MultiPlaneClos()
    f.add_argument("--planes", type=int, default=dflt.planes)
    f.add_argument("--spines", type=int, default=dflt.spines, help="spines per plane")
    f.add_argument("--leaves", type=int, default=dflt.leaves, help="leaves (racks) per plane")
    f.add_argument("--hosts-per-leaf", type=int, default=dflt.hosts_per_leaf)
    f.add_argument("--rate", type=float, default=dflt.host_link.rate_mbit,
                   help="link rate in Mbit/s (host links, and fabric links unless --fabric-rate)")
    f.add_argument("--fabric-rate", type=float, default=None, help="leaf-spine rate, Mbit/s")
    f.add_argument("--queue", type=int, default=dflt.host_link.queue_packets,
                   help="egress FIFO depth in packets")
    f.add_argument("--name", default="emu", help="fabric name (netns names sae-NAME-...)")
    f.add_argument("--dcs", type=int, default=1, help="data centers joined by DCI links")
    f.add_argument("--dci-rate", type=float, default=_DCI.rate_mbit, help="DCI link rate, Mbit/s")
    f.add_argument("--dci-delay-ms", type=float, default=_DCI.delay_ms,
                   help="DCI one-way delay, ms (default %(default)g: DciSpec's)")
    f.add_argument("--dci-loss", type=float, default=_DCI.loss, help="DCI random loss fraction")
    f.add_argument("--delay-backend", choices=("auto", "netem", "userspace"), default="auto",
                   help="DCI delay: netem if the kernel has it (auto), or a TAP relay")
    f.add_argument("--control-plane", choices=("static", "bgp"), default="static",
                   help="ECMP routes: static, or learnt by FRR eBGP with BFD (RFC 7938)")
    _bfd_args(f)
    f.add_argument("--cli", action="store_true", help="open Mininet's CLI on the fabric")
    f.add_argument("--timeline", help="a failure timeline (.py or .toml) to fire once built")
    f.add_argument("--capture", action="append", metavar="NODE:IFNAME",
                   help="tcpdump this port (repeatable); pcaps decode with our scapy layer")
    f.add_argument("--capture-dir", default="results/captures", help="where pcaps go")
    f.add_argument("--hold", action="store_true",
                   help="with --timeline: keep the fabric up after the last event")
    f.set_defaults(func=cmd_fabric)

    c = sub.add_parser("clean", help="remove everything left by crashed runs")
    c.add_argument("--force", action="store_true", help="also fabrics whose owner is alive")
    c.set_defaults(func=cmd_clean)

    m = sub.add_parser("demo", help="the main job: train the digits CNN over MRC, RC and gloo "
                       "through a link cut and microbursts; compare")
    m.add_argument("--out", help="results directory (default results/demo-TIMESTAMP)")
    m.add_argument("--steps", type=int, default=None, help="training steps per transport")
    m.add_argument("--ablation", action="store_true",
                   help="also MRC with each congestion mechanism off in turn (no trimming, "
                   "no ECN, equal NIC shares, plain switches)")
    _force_arg(m)
    m.add_argument("--paths", action="store_true",
                   help="instead: prove the default fabric's paths and measure their goodput")
    m.add_argument("--seconds", type=float, default=1.0, help="--paths: window per test")
    m.set_defaults(func=cmd_demo)

    r = sub.add_parser("run", help="run an experiment file (TOML): train on a fabric with a "
                       "failure timeline; JSONL/CSV/PNG results",
                       description="Run an experiment file (TOML; every key is documented in "
                       "workloads/experiment/__init__.py): build its fabric, train with one "
                       "worker per host, fire its failure timeline, write results. Everything "
                       "in the file is validated before anything is built. A Python timeline "
                       "(timeline = \"x.py\") is code: one that only declares events is read "
                       "without running it, any other runs as root when the run starts, "
                       "before the fabric is built, with everything root can do. Name only "
                       "scripts you trust.")
    r.add_argument("file", nargs="?",
                   help="experiment file, e.g. experiments/training/demo_digits.toml")
    r.add_argument("--keys", action="store_true",
                   help="print every experiment-file key: default, values, meaning")
    r.add_argument("--out", help="results directory (default results/NAME-TIMESTAMP)")
    _force_arg(r)
    r.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a key, e.g. --set workload.steps=50 (repeatable)")
    r.add_argument("--transports", metavar="A,B,...",
                   help="run once per transport (mrc, rc, dblp, gloo) on one fabric, compared")
    r.add_argument("--systems", metavar="A,B,...",
                   help="run once per system on one fabric, compared: a transport with its "
                   "switches (mrc, mrc-no-trim, mrc-no-ecn, mrc-equal-nics, mrc-reps, "
                   "mrc-plain, rc, rc-dcqcn, rc-lossy, tcp: workloads/systems.py)")
    r.add_argument("--capture", action="append", metavar="NODE:IFNAME",
                   help="tcpdump the transports' packets on this port (e.g. h4:p0, p0l1:h4) "
                        "during every run: OUT/captures/LABEL-repN-NODE-IFNAME.pcap, a capture "
                        "record each (repeatable; costs CPU)")
    r.set_defaults(func=cmd_run)

    b = sub.add_parser("bench", help="benchmarks")
    bsub = b.add_subparsers(dest="bench", required=True)
    def bench(name: str, help: str, quick: str) -> argparse.ArgumentParser:
        sp = bsub.add_parser(name, help=help)
        sp.add_argument("--json", action="store_true")
        sp.add_argument("--quick", action="store_true", help=quick)
        sp.set_defaults(func=cmd_bench)
        return sp

    bench("fabric", "build/teardown time vs plain Mininet", "reference graph only")
    bench("transport", "MRC vs RC over ECMP vs TCP: goodput, permutation, failure "
          "ride-through, CPU per packet", "smaller messages")
    bench("dblp", "round latency through microbursts: DBLP vs reliable, MLT-style and "
          "OptiReduce-style rounds", "fewer rounds")
    bt = bench("training", "digits CNN over MRC, RC and gloo: healthy, link cut, "
               "microbursts; DBLP vs MRC time to target loss under bursts", "fewer steps")
    bt.add_argument("--out", help="results directory (default results/bench-training-TIME)")
    _force_arg(bt)
    bench("acks", "MRC's loss detection with ACKs per packet, in ticks, and one per wake-up "
          "(the engine's), on the fake network: completion, retransmissions, RTOs (no root)",
          "3 seeds instead of 7")
    bench("bursts", "MRC vs RC through microbursts onto the receiver's host ports, on the "
          "fake network: bursts by step, swept over the step cycle; worst, typical and "
          "paired burst steps (no root)",
          "16 alignments x 2 repetitions per message size instead of 48 x 3")
    bench("robustness", "hostile datagrams a receiver absorbs while a transfer keeps 90 %% "
          "of its goodput, drivers' memory under a flapping and a gray link, the largest "
          "fabric this machine builds", "fewer kinds, rates and sizes")
    bench("explorer", "the explorer: search speed on the reference space, speed-ups over "
          "baselines on a grid, validation errors (no root)", "fewer axis values, no points "
          "file, a corner of the grid")
    bench("sweep", "emu sweep on a local Ray cluster vs the same points run one by one: "
          "overhead per point, projected wall time of a 1,000-point sweep on N nodes",
          "the smoke sweep's --quick form")
    bo = bsub.add_parser("failover", help="ECMP + BFD/BGP: convergence and loss per failure")
    bo.add_argument("--json", action="store_true")
    _bfd_args(bo)
    bo.set_defaults(func=cmd_bench)

    cal = sub.add_parser("calibrate", help="measure the transports' dimensionless figures "
                         "(eta, load balance, tails, recovery) into a calibration v2 record")
    cal.add_argument("--out", help="record path (default results/calibrate-TIME/"
                     "calibration.json)")
    cal.add_argument("--quick", action="store_true", help="3 repetitions, fewer sizes")
    cal.add_argument("--transports", default="mrc,rc,tcp,dblp", metavar="A,B,...",
                     help="among mrc, rc, tcp, dblp")
    cal.add_argument("--training-results", metavar="DIR",
                     help="an `emu bench training` output directory: DBLP's steps ratio")
    cal.add_argument("--json", action="store_true", help="print the record")
    _force_arg(cal, "replace an existing --out file")
    cal.set_defaults(func=cmd_calibrate)

    x = sub.add_parser("explore", help="full-scale projection: search placement x schedule "
                       "x network for training across DCs (no root needed)")
    configure_explore(x)
    x.set_defaults(func=cmd_explore)

    configure_reproduce(sub)
    configure_sweep(sub)
    return p


def _force_arg(p: argparse.ArgumentParser,
               help: str = "write into an --out directory that already holds files") -> None:
    p.add_argument("--force", action="store_true", help=help)


def _bfd_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bfd-ms", type=int, default=100, help="BFD tx/rx interval (ms)")
    p.add_argument("--bfd-multiplier", type=int, default=3, help="BFD detect multiplier")


def _apply_timeout_scale(text: str | None) -> None:
    """``--timeout-scale``, checked, into the environment every child inherits; without
    it an inherited ``SAE_TIMEOUT_SCALE`` is still checked here, before anything starts."""
    from emu import timeouts

    if text is not None:
        os.environ[timeouts.ENV] = f"{timeouts.parse_scale(text, '--timeout-scale'):g}"
    timeouts.timeout_scale()


def main(argv: list[str] | None = None) -> int:
    """Entry point of `emu`."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    install_stop_handlers()
    try:
        _apply_timeout_scale(args.timeout_scale)
        return args.func(args)
    except (EmuError, TopologyError, SpecError, ValueError) as e:
        print(f"emu: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        signum = interrupts.stopped_by() or signal.SIGINT
        print(f"interrupted ({signal.Signals(signum).name}); torn down", file=sys.stderr)
        return 128 + signum


if __name__ == "__main__":
    sys.exit(main())
