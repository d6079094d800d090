"""SurfaceResolver keeps the current request per thread (the local gateway runs requests on threads)."""

from __future__ import annotations

import threading

from functions.api.queues import app


def test_current_event_and_context_are_per_thread():
    app.current_event = "main-thread-event"
    app.context = {"who": "main"}
    seen = {}

    def other():
        seen["event"] = getattr(app._local, "event", None)
        seen["context"] = dict(app.context)
        app.current_event = "other-thread-event"

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == {"event": None, "context": {}}
    assert app.current_event == "main-thread-event" and app.context == {"who": "main"}
