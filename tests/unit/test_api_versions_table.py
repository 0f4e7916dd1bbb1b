"""The ApiVersions table is what the handlers register: every advertised key has a handler,
and kio has a request schema for every advertised version."""

from __future__ import annotations

from kio.index import load_request_schema

from oncelog.broker.api import HANDLERS, SUPPORTED, load_all


def test_every_advertised_key_has_a_handler_and_every_version_decodes() -> None:
    load_all()
    assert SUPPORTED, "no handlers registered"
    assert set(SUPPORTED) == set(HANDLERS)
    for key, (low, high) in SUPPORTED.items():
        assert 0 <= low <= high
        for version in range(low, high + 1):
            schema = load_request_schema(key, version)
            assert int(schema.__api_key__) == key


def test_delete_records_and_offset_delete_are_served() -> None:
    load_all()
    assert SUPPORTED[21] == (0, 2)
    assert SUPPORTED[47] == (0, 0)
