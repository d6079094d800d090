"""Wire the components together; `build()` is the whole program and returns the stack outputs.

Kept apart from __main__.py so the tests can run it under Pulumi mocks as often as they like.
"""

from __future__ import annotations

import pulumi

from infra import alarms, api, database, functions, layers, migrate, network, schedules, settings


def build() -> dict[str, pulumi.Input]:
    s = settings.load()
    net = network.build(s)
    db = database.build(s, net)
    lyr = layers.build(s)
    fns = functions.build(s, net, db, lyr)
    http = api.build(s, fns)
    schedules.build(s, fns)
    migration = migrate.build(fns[functions.MIGRATE], db)
    topic = alarms.build(s, http, fns)
    return {
        "api_url": http.url,
        "db_proxy_endpoint": db.endpoint,
        "db_secret_arn": db.secret_arn,
        "function_names": {name: d.function.name for name, d in fns.items()},
        "migrations_sha256": migration.triggers.apply(lambda t: (t or {}).get("migrations_sha256")),
        "alarm_topic_arn": topic.arn if topic else None,
    }
