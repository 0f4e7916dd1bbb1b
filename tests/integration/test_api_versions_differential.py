"""ApiVersions compared live with Apache Kafka 4.4: oncelog never advertises an API Kafka 4.4
does not serve, nor a version range outside Kafka's (it may serve fewer keys and a narrower
range, never more).

One deliberate exception: InitProducerId v6 (KIP-939's two-phase commit, what oncelog is
for), which Kafka 4.4 implements but advertises only with ``unstable.api.versions.enable``;
the test checks that such a Kafka does serve it, so the exception stays exactly that."""

from __future__ import annotations

from kio.schema.api_versions.v3 import request as av
from rawkafka import request_once

from oncelog.harness.broker import BrokerProcess
from tests.conftest import KafkaFactory

# api key -> the highest version oncelog serves that Kafka 4.4 marks unstable
UNSTABLE_IN_KAFKA = {22: 6}


def advertised(bootstrap: str) -> dict[int, tuple[int, int]]:
    response = request_once(bootstrap, av.ApiVersionsRequest(
        client_software_name="oncelog-tests", client_software_version="1"))
    assert int(response.error_code) == 0
    return {int(k.api_key): (int(k.min_version), int(k.max_version))
            for k in response.api_keys}


def wider_than(ours: dict[int, tuple[int, int]], kafka: dict[int, tuple[int, int]]
               ) -> dict[int, dict[str, tuple[int, int]]]:
    return {
        key: {"oncelog": ours[key], "kafka": kafka[key]}
        for key in sorted(set(ours) & set(kafka))
        if ours[key][0] < kafka[key][0] or ours[key][1] > kafka[key][1]
    }


def test_api_versions_never_claim_more_than_kafka(
    kafka_factory: KafkaFactory, broker: BrokerProcess
) -> None:
    ours = advertised(broker.bootstrap)
    kafka = advertised(kafka_factory().bootstrap)
    only_ours = sorted(set(ours) - set(kafka))
    assert only_ours == [], f"keys oncelog serves and Kafka 4.4 does not: {only_ours}"
    wider = wider_than(ours, kafka)
    assert {key: ranges["oncelog"][1] for key, ranges in wider.items()} == UNSTABLE_IN_KAFKA, (
        f"version ranges wider than Kafka 4.4's: {wider}")
    with_unstable = advertised(
        kafka_factory(configs={"unstable.api.versions.enable": "true"}).bootstrap)
    assert wider_than(ours, with_unstable) == {}
