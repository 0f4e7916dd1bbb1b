"""``oncelog verify``: run the exactly-once workload against a deployment, check the
history and write a report (issue 15).

- ``--bootstrap-server HOST:PORT``: an external deployment (any Kafka-compatible broker);
  the user injects faults, so ``--faults`` is a usage error there.
- ``--spawn single|cluster``: start the brokers (and etcd) and inject ``--faults`` on a
  schedule that ``--seed`` reproduces.
- ``--command-config FILE``: client configs (Java names, e.g. SASL_SSL and its login) for
  the set-up, every worker and the final read.

The report directory holds ``history.jsonl``, ``results.json``, ``report.html``,
``workers/`` and ``logs/``. Exit 0 when the history is valid, 1 when it shows anomalies
(or the run failed), 2 for usage errors.
"""

from __future__ import annotations

import argparse
import logging
import random
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from oncelog.cli.common import CommandError, bootstrap_servers, command_configs

if TYPE_CHECKING:
    from oncelog.verify.deployment import Deployment, FaultInjector, Workers
    from oncelog.verify.history import RunInfo
    from oncelog.verify.runner import InjectorFactory, VerifyOptions
    from oncelog.verify.spawn import ClusterDeployment, SingleDeployment

log = logging.getLogger("oncelog.cli.verify")

FAULT_KINDS = ("kill", "pause", "partition", "client-crash", "cut", "leader-kill",
               "coordinator-kill")
CLIENT_NAMES = ("oncelog", "confluent-kafka", "java")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600}


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``2m``, ``1.5h`` → seconds (argparse type)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if match is None or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(
            f"expected a positive duration like 90, 90s, 2m or 1h, got {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _names(allowed: tuple[str, ...], what: str) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        unknown = [n for n in names if n not in allowed]
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {', '.join(unknown) or repr(text)}; "
                f"choose from {', '.join(allowed)}")
        return list(dict.fromkeys(names))
    return parse


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "verify", help="check exactly-once under faults: workload, checker, report",
        description="Run transactional consume-transform-produce clients against a "
        "deployment, check the history for exactly-once anomalies and write report.html.")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap-server", type=bootstrap_servers, metavar="HOST:PORT",
                       help="an external deployment; you inject faults yourself")
    where.add_argument("--spawn", choices=("single", "cluster"),
                       help="start a single broker or a 3-broker cluster and inject faults")
    p.add_argument("--command-config", type=Path, default=None, metavar="FILE",
                   help="properties file of client configs for every worker, as Kafka's "
                   "tools take, e.g. security.protocol=SASL_SSL, sasl.mechanism, "
                   "sasl.jaas.config, ssl.truststore.location (default: none)")
    p.add_argument("--duration", type=parse_duration, default=600.0, metavar="TIME",
                   help="how long the workload runs: 90, 90s, 2m, 1h (default 10m)")
    p.add_argument("--seed", type=int, default=None,
                   help="seeds the workload and the fault schedule (default: random)")
    p.add_argument("--faults", type=_names(FAULT_KINDS, "fault"), default=None,
                   metavar="KIND,...",
                   help=f"faults to inject with --spawn, of {', '.join(FAULT_KINDS)} "
                   "(default: all the deployment supports)")
    p.add_argument("--clients", type=_names(CLIENT_NAMES, "client"),
                   default=["oncelog", "confluent-kafka"], metavar="CLIENT,...",
                   help=f"clients, round-robin over workers, of {', '.join(CLIENT_NAMES)} "
                   "(default oncelog,confluent-kafka)")
    p.add_argument("--concurrency", type=int, default=4, metavar="N",
                   help="worker processes (default 4)")
    p.add_argument("--partitions", type=int, default=4, metavar="N",
                   help="partitions of each topic (default 4)")
    p.add_argument("--broker-name", default=None, metavar="NAME",
                   help="what the report calls the broker (default oncelog, or 'external')")
    p.add_argument("--java-classpath", default=None, metavar="CP",
                   help="classpath of the Java worker, for --clients java (default: the "
                   "harness `make reference` builds)")
    p.add_argument("--report", type=Path, required=True, metavar="DIR",
                   help="directory for report.html, results.json, history.jsonl, logs")
    p.add_argument("-v", "--verbose", action="store_true", help="log the run's progress")
    p.set_defaults(handler=None)


def _check_usage(args: argparse.Namespace) -> None:
    command_configs(args)  # an unreadable --command-config is a usage error (exit 2)
    if args.bootstrap_server and args.faults:
        raise CommandError("--faults needs --spawn: against an external deployment "
                           "(--bootstrap-server) you inject faults yourself", 2)
    if "java" in args.clients:
        from oncelog.verify import java_worker
        try:
            java_worker.classpath(args.java_classpath)
        except java_worker.JavaWorkerMissing as exc:
            raise CommandError(str(exc), 2) from None
    if args.concurrency < 1 or args.partitions < 1:
        raise CommandError("--concurrency and --partitions must be at least 1", 2)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    try:
        _check_usage(args)
        return _verify(args)
    except CommandError as exc:
        print(f"oncelog: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("oncelog: interrupted", file=sys.stderr)
        return 130


def _verify(args: argparse.Namespace) -> int:
    from oncelog.verify.runner import RunError, VerifyOptions
    from oncelog.verify.runner import run as run_verify

    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    report = args.report.resolve()
    options = VerifyOptions(
        report_dir=report, duration_s=args.duration, seed=seed, clients=args.clients,
        concurrency=args.concurrency, partitions=args.partitions, faults=args.faults or [],
        broker_name=args.broker_name or ("oncelog" if args.spawn else "external"),
        java_classpath=args.java_classpath,
        command_config=args.command_config.resolve() if args.command_config else None,
        command=shlex.join(["oncelog", *sys.argv[1:]]))
    deployment: Deployment
    factory: InjectorFactory | None = None
    if args.bootstrap_server:
        from oncelog.verify.spawn import ExternalDeployment
        deployment = ExternalDeployment(args.bootstrap_server, options.broker_name)
    else:
        deployment, factory = _spawn(args.spawn, options, report)
    try:
        results = run_verify(options, deployment, factory)
    except RunError as exc:
        raise CommandError(f"verify run failed: {exc}") from None
    finally:
        deployment.close()
    from oncelog.verify.summary import summary
    print(summary(results, report, seed))
    return 0 if results.valid else 1


def _spawn(kind: str, options: VerifyOptions, report: Path
           ) -> tuple[SingleDeployment | ClusterDeployment, InjectorFactory]:
    """The spawned deployment and a factory of its fault injector (oncelog.verify.spawn,
    nemesis and faults)."""
    from oncelog.verify import faults, nemesis, spawn
    wanted = options.faults or list(faults.supported_kinds(kind, netns=kind == "cluster"))
    try:
        faults.check_kinds(wanted, kind, netns=True)  # what no deployment of the kind can do
    except faults.UnsupportedFault as exc:
        raise CommandError(str(exc), 2) from None
    directory = report / "deployment"
    deployment: SingleDeployment | ClusterDeployment = (
        spawn.SingleDeployment(directory) if kind == "single"
        else spawn.ClusterDeployment(directory))
    netns = bool(getattr(deployment, "netns", False))
    try:
        if not options.faults:
            wanted = list(faults.supported_kinds(kind, netns=netns))
        options.faults = faults.check_kinds(wanted, kind, netns=netns)
    except faults.UnsupportedFault as exc:
        deployment.close()
        raise CommandError(str(exc), 2) from None
    schedule = faults.plan(options.seed, options.duration_s, options.faults, kind, netns=netns)

    def factory(workers: Workers, info: RunInfo, transactional_ids: list[str]) -> FaultInjector:
        return nemesis.Nemesis(schedule, deployment, workers, started_at=info.started_at,
                               topics=[info.input_topic, info.output_topic],
                               transactional_ids=transactional_ids)
    return deployment, factory
