"""The transactions console in headless chromium: the page shows a partition held by an
open transaction (gap > 0, the transaction named), an operator aborts it from the page
through the confirmation dialog, and the page shows the LSO catching up.

``ONCELOG_CONSOLE_SCREENSHOT=docs/console.png`` saves the stuck page (the README's picture).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from oncelog.client import Admin, Consumer, Producer, TopicPartition
from oncelog.harness.broker import REPO_ROOT, BrokerProcess
from tests.support.chromium import Page, chromium_page
from tests.support.console import console_broker
from tests.support.names import unique_name, unique_topic

BrokerFactory = Callable[..., BrokerProcess]


def cell(page: Page, partition: str, column: int) -> str:
    """The text of a column of the topics table's row for ``partition`` ('' if absent)."""
    selector = json.dumps(f'#topics tr[data-partition="{partition}"]')
    return str(page.evaluate(
        f"(() => {{ const r = document.querySelector({selector});"
        f" return r ? r.children[{column}].textContent : ''; }})()"
    ))


def test_abort_from_the_page_releases_the_stuck_partition(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker, base = console_broker(broker_factory)
    topic = unique_topic("browser")
    txn_id = unique_name("held")
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topic(topic, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id})
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"open", partition=0)
        producer.flush()
        with Producer({"bootstrap.servers": broker.bootstrap}) as plain:
            for value in (b"a", b"b", b"c"):
                plain.send(topic, value, partition=0)
            plain.send(topic, b"d", partition=1)
            plain.flush()
        with Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "billing"}) as c:
            c.commit({TopicPartition(topic, 1): 0})

        with chromium_page(f"{base}/") as page:
            held = f"{topic}-0"
            page.wait_for(f"document.querySelector('#topics tr[data-partition=\"{held}\"].stuck')")
            assert cell(page, held, 3) == "4"  # high watermark
            assert cell(page, held, 4) == "0"  # LSO: held at the transaction's first record
            assert cell(page, held, 5) == "4"
            assert txn_id in cell(page, held, 6)
            assert cell(page, f"{topic}-1", 5) == "0"
            page.wait_for("document.querySelector('#groups').innerText.includes('billing')")
            if shot := os.environ.get("ONCELOG_CONSOLE_SCREENSHOT"):
                (REPO_ROOT / shot).write_bytes(page.screenshot())
            (tmp_path / "stuck.png").write_bytes(page.screenshot())

            button = json.dumps(f'#transactions tr[data-transactional-id="{txn_id}"] button')
            page.evaluate(f"document.querySelector({button}).click()")
            page.wait_for("document.getElementById('dialog').style.display === 'block'")
            assert txn_id in page.evaluate("document.getElementById('dialog-summary').textContent")
            # The confirm button stays disabled until the transactional id is typed.
            assert page.evaluate("document.getElementById('dialog-confirm').disabled") is True
            page.evaluate(
                "(() => { const i = document.getElementById('dialog-input');"
                f" i.value = {json.dumps(txn_id)};"
                " i.dispatchEvent(new Event('input')); })()"
            )
            assert page.evaluate("document.getElementById('dialog-confirm').disabled") is False
            page.evaluate("document.getElementById('dialog-confirm').click()")

            page.wait_for(f"document.querySelector('#topics tr[data-partition=\"{held}\"]')"
                          ".dataset.gap === '0'")
            assert cell(page, held, 4) == cell(page, held, 3) == "5"  # + the ABORT marker
            assert "Done: abort the open transaction" in page.evaluate(
                "document.getElementById('notice').textContent")
            page.wait_for(f"!document.querySelector('#transactions').innerText"
                          f".includes({json.dumps(txn_id)})")
            (tmp_path / "released.png").write_bytes(page.screenshot())
    finally:
        producer.close()
