"""oncelog's transactions console: a small web page that shows why read_committed readers
are stuck (open, prepared 2PC and hanging transactions holding partitions' LSO below the high
watermark; consumer groups' lag) and lets an operator abort or force-terminate, behind a
confirmation. Built on the Kafka protocol only: ``oncelog ui --bootstrap-server`` runs it
against any Kafka-compatible broker, ``oncelog serve --ui HOST:PORT`` inside the broker.

``state`` collects the snapshot, ``server`` answers HTTP, ``page.html`` is the page.
"""
