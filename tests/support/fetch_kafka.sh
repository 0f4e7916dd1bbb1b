#!/bin/sh
# Assemble the reference Apache Kafka 4.4 broker and build the Java harness, once.
#
# Runs `mvn package` on tests/java (see docs/reference-kafka.md), which fills
#   $CACHE/kafka-4.4.0/libs/          the broker's runtime classpath (kafka_2.13 4.4.0 + deps)
#   $CACHE/harness-4.4.0/             oncelog-harness.jar and libs/ (kafka-clients 4.4.0)
#   $CACHE/tools-4.3.1/libs/          kafka-tools 4.3.1 (TransactionsCommand) and its deps
#   $CACHE/streams-4.3.1/             oncelog-streams.jar and libs/ (kafka-streams and
#                                     kafka-tools 4.3.1, with kafka-clients 4.3.x)
# with CACHE=${ONCELOG_REFERENCE_CACHE:-<repo>/.cache}; Maven's own downloads go to ~/.m2.
# A stamp file records a hash of the Maven project: when it matches, this is a no-op.
# Then runs `mvn package` on tests/spark/connector, which fills
#   $CACHE/spark-kafka-<version>/    Spark's own Kafka connector and its extra jars
# (tests/spark/test_spark_kafka_connector.py), with its own stamp.
# Called by `make reference` (a prerequisite of `make test`).
set -eu

REPO=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${ONCELOG_REFERENCE_CACHE:-$REPO/.cache}
PROJECT=$REPO/tests/java
STAMP=$CACHE/reference-kafka-4.4.0.stamp

project_hash() {
    (cd "$PROJECT" && find . -type f \( -name pom.xml -o -name '*.java' -o -name '*.properties' \) \
        | LC_ALL=C sort | xargs sha256sum) | sha256sum | cut -d' ' -f1
}

need_tools() {
    for tool in java mvn; do
        if ! command -v "$tool" >/dev/null 2>&1; then
            echo "fetch_kafka.sh: '$tool' not found; the reference Kafka needs Java 17+ and Maven 3.8+" >&2
            exit 1
        fi
    done
}

# Spark's Kafka connector: a one-file Maven project, its own stamp, its own output dir.
SPARK_PROJECT=$REPO/tests/spark/connector
SPARK_STAMP=$CACHE/spark-kafka.stamp
fetch_spark_connector() {
    spark_want=$(sha256sum "$SPARK_PROJECT/pom.xml" | cut -d' ' -f1)
    if [ -f "$SPARK_STAMP" ] && [ "$(cat "$SPARK_STAMP")" = "$spark_want" ]; then
        echo "Spark Kafka connector: up to date in $CACHE"
        return 0
    fi
    need_tools
    echo "Spark Kafka connector: fetching with Maven into $CACHE"
    rm -rf "$CACHE"/spark-kafka-* "$CACHE/build/spark-kafka-connector" "$SPARK_STAMP"
    mkdir -p "$CACHE"
    mvn -B -q -Dstyle.color=never -f "$SPARK_PROJECT/pom.xml" package "-Dreference.cache=$CACHE"
    echo "$spark_want" > "$SPARK_STAMP"
}

want=$(project_hash)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
    echo "reference Kafka 4.4.0: up to date in $CACHE"
    fetch_spark_connector
    exit 0
fi

need_tools

echo "reference Kafka 4.4.0: fetching with Maven into $CACHE (first run downloads ~50 MB into ~/.m2)"
start=$(date +%s)
# Stale jars from an older project would stay on the classpath: start from empty dirs.
rm -rf "$CACHE/kafka-4.4.0" "$CACHE/harness-4.4.0" "$CACHE/tools-4.3.1" "$CACHE/streams-4.3.1" \
    "$CACHE/build" "$STAMP"
mkdir -p "$CACHE"
mvn -B -q -Dstyle.color=never -f "$PROJECT/pom.xml" package "-Dreference.cache=$CACHE"
echo "$want" > "$STAMP"
echo "reference Kafka 4.4.0: ready in $CACHE after $(( $(date +%s) - start ))s"
fetch_spark_connector
