"""BrokerProcess and the broker fixtures.

The first group runs the real ``oncelog serve`` (marked ``integration``: it depends on the
serve command). The second drives ``BrokerProcess`` with a stand-in script that behaves like
``oncelog serve`` (ready line, SIGTERM, address in use), so the process handling itself —
readiness, start failures, port retry, exit-code checks, restarts — is tested on its own.
"""

from __future__ import annotations

import signal
import socket
import sys
import textwrap
from pathlib import Path

import pytest

from oncelog.harness.broker import BrokerProcess
from oncelog.harness.process import ServerStartError, ServerStopError
from tests.conftest import BrokerFactory
from tests.support.names import unique_topic

# -- the real oncelog serve ------------------------------------------------------------------


def _accepts(bootstrap: str) -> bool:
    host, _, port = bootstrap.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        return True
    except OSError:
        return False


@pytest.mark.integration
def test_serve_prints_ready_line_and_exits_0_on_sigterm(broker: BrokerProcess) -> None:
    assert broker.ready_line == f"oncelog ready on {broker.bootstrap}"
    assert (broker.ready_host, broker.ready_port) == ("127.0.0.1", broker.port)
    assert _accepts(broker.bootstrap)
    assert broker.stop() == 0
    assert not broker.is_running
    assert not _accepts(broker.bootstrap)


@pytest.mark.integration
def test_serve_restarts_on_same_port_and_data_dir(broker: BrokerProcess) -> None:
    port, data_dir = broker.port, broker.data_dir
    broker.restart()
    assert (broker.port, broker.data_dir, broker.starts) == (port, data_dir, 2)
    assert _accepts(broker.bootstrap)
    broker.restart(kill=True)
    assert broker.starts == 3
    assert broker.stop() == 0
    assert broker.log_text().count("oncelog ready on") == 3


@pytest.mark.integration
def test_serve_kill_is_sigkill(broker: BrokerProcess) -> None:
    assert broker.kill() == -signal.SIGKILL
    assert not _accepts(broker.bootstrap)


@pytest.mark.integration
def test_factory_starts_independent_brokers(broker_factory: BrokerFactory) -> None:
    first = broker_factory(configs={"num.partitions": 2})
    second = broker_factory(node_id=2)
    assert first.port != second.port
    assert first.data_dir != second.data_dir
    assert "num.partitions=2" in " ".join(first.argv())
    assert _accepts(first.bootstrap) and _accepts(second.bootstrap)


@pytest.mark.integration
def test_shared_broker_is_up(shared_broker: BrokerProcess) -> None:
    assert shared_broker.is_running
    assert _accepts(shared_broker.bootstrap)
    assert unique_topic() != unique_topic()


# -- BrokerProcess mechanics, with a stand-in for ``oncelog serve`` --------------------------

FAKE_SERVE = textwrap.dedent(
    """
    import argparse, signal, socket, sys, time
    parser = argparse.ArgumentParser()
    parser.add_argument("command")
    parser.add_argument("--data-dir")
    parser.add_argument("--listen")
    parser.add_argument("--log-level")
    parser.add_argument("--advertised")
    parser.add_argument("-c", action="append", default=[])
    args = parser.parse_args()
    conf = dict(kv.split("=", 1) for kv in args.c)
    if conf.get("mode") == "crash":
        print("boom: bad configuration", file=sys.stderr)
        sys.exit(3)
    if conf.get("mode") == "silent":
        time.sleep(60)
    host, _, port = args.listen.rpartition(":")
    sock = socket.socket()
    try:
        sock.bind((host, int(port)))
    except OSError as exc:
        print(f"cannot serve: {exc}", file=sys.stderr)
        sys.exit(1)
    sock.listen()
    code = int(conf.get("exit_code", "0"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(code))
    print("starting up", flush=True)
    print(f"oncelog ready on {host}:{port}")
    while True:
        time.sleep(1)
    """
)


def _fake(tmp_path: Path, **kwargs: object) -> BrokerProcess:
    script = tmp_path / "fake_serve.py"
    script.write_text(FAKE_SERVE)
    return BrokerProcess(
        tmp_path / "data", argv_prefix=[sys.executable, str(script)], **kwargs  # type: ignore[arg-type]
    )


def test_ready_line_parsed_and_stop_returns_exit_code(tmp_path: Path) -> None:
    with _fake(tmp_path, advertised="127.0.0.1:1") as server:
        assert server.ready_port == server.port
        assert "--advertised 127.0.0.1:1" in " ".join(server.argv())
        assert server.stop() == 0
        assert server.log_path == tmp_path / "data-oncelog.log"
        assert "starting up" in server.log_text()


def test_nonzero_exit_after_sigterm_raises_with_log(tmp_path: Path) -> None:
    with _fake(tmp_path, configs={"exit_code": 4}) as server:
        with pytest.raises(ServerStopError, match="exited with code 4"):
            server.stop()
        assert server.returncode == 4


def test_nonzero_exit_can_be_returned_unchecked(tmp_path: Path) -> None:
    with _fake(tmp_path, configs={"exit_code": 4}) as server:
        assert server.stop(check=False) == 4


def test_exit_before_ready_reports_log(tmp_path: Path) -> None:
    server = _fake(tmp_path, configs={"mode": "crash"})
    with pytest.raises(ServerStartError, match="exited with code 3") as info:
        server.start()
    assert "boom: bad configuration" in str(info.value)
    assert not info.value.address_in_use


def test_not_ready_in_time_is_killed(tmp_path: Path) -> None:
    server = _fake(tmp_path, configs={"mode": "silent"}, start_timeout=0.5)
    with pytest.raises(ServerStartError, match="not ready after"):
        server.start()
    assert not server.is_running


def test_port_taken_after_choosing_is_retried_once(tmp_path: Path) -> None:
    server = _fake(tmp_path)
    taken = server.port
    with socket.create_server(("127.0.0.1", taken)):
        with server:
            assert server.port != taken
            assert server.ready_port == server.port
            assert server.starts == 2


def test_explicit_port_in_use_is_not_retried(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as holder:
        port = holder.getsockname()[1]
        server = _fake(tmp_path, port=port)
        with pytest.raises(ServerStartError) as info:
            server.start()
        assert info.value.address_in_use
        assert server.port == port


def test_restart_keeps_port_and_appends_log(tmp_path: Path) -> None:
    with _fake(tmp_path) as server:
        port = server.port
        server.restart(kill=True)
        assert server.port == port and server.is_running
        server.restart()
        assert server.log_text().count("oncelog ready on") == 3
        assert server.log_text(since_start=True).count("oncelog ready on") == 1


def test_wrapped_process_is_signalled_through_its_child(tmp_path: Path) -> None:
    """Like ``py-spy record -- python ...``: the wrapper exits with its child's status."""
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(
        "import signal, subprocess, sys\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "sys.exit(subprocess.call(sys.argv[1:]))\n"
    )
    script = tmp_path / "fake_serve.py"
    script.write_text(FAKE_SERVE)
    server = BrokerProcess(
        tmp_path / "data",
        argv_prefix=[sys.executable, str(wrapper), sys.executable, str(script)],
        wrapped=True,
    )
    with server:
        assert server.stop(timeout=10) == 0
