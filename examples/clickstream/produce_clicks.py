"""Produces a few thousand clicks to the `clicks` topic with Kafka's own
console producer (no Python Kafka client needed):

    python3 examples/clickstream/produce_clicks.py 5000 | \
      scripts/services.sh kafka-run org.apache.kafka.tools.ConsoleProducer \
        --bootstrap-server localhost:9092 --topic clicks
"""

import json
import random
import sys
from datetime import datetime, timedelta, timezone

count = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
pages = ["/", "/search", "/item", "/cart", "/checkout"]
start = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(minutes=10)
rng = random.Random(7)
for i in range(count):
    ts = start + timedelta(milliseconds=120 * i + rng.randint(-500, 500))
    print(json.dumps({"uid": f"u{rng.randint(1, 300)}", "url": rng.choice(pages),
                      "ts": ts.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]}))
# One malformed record, to see the dead-letter topic at work.
print("{not json")
