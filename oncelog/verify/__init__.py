"""``oncelog verify``: a Jepsen-style workload, fault injector, checker and report for any
Kafka-compatible broker (docs/verify.md).

Modules: ``history`` (the operation records every part shares), ``checker`` (sans-IO
anomaly search over a history), ``faults`` (seeded fault schedules), ``workload`` and
``runner`` (client worker processes and the run's orchestration), ``report`` (report.html
and results.json).
"""
