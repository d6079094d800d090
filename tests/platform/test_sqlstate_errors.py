"""PB-class SQLSTATEs become typed errors in one place; a JSON hint becomes the error's details."""

from __future__ import annotations

from postbox.errors import Conflict, Gone, PreconditionFailed, TooManyRequests, from_sqlstate


def test_statuses_map_to_their_error_types_with_the_code_from_detail():
    for sqlstate, kind, status in (("PB409", Conflict, 409), ("PB410", Gone, 410),
                                   ("PB412", PreconditionFailed, 412), ("PB429", TooManyRequests, 429)):
        error = from_sqlstate(sqlstate, "msg", "SOME_CODE")
        assert type(error) is kind and (error.status, error.code, error.message) == (status, "SOME_CODE", "msg")
    assert from_sqlstate("23505", "duplicate", None) is None  # not ours: the caller re-raises it


def test_a_json_hint_carries_the_details():
    error = from_sqlstate("PB409", "The stream is closed.", "STREAM_CLOSED", '{"closed": true, "next_offset": 7}')
    assert error.details == {"closed": True, "next_offset": 7}
    assert from_sqlstate("PB404", "gone", None).code == "not_found" and from_sqlstate("PB404", "x", None).details == {}


def test_a_hint_that_is_not_a_json_object_is_kept_as_text():
    from postbox.errors import NotFound, from_sqlstate

    for hint in ("plain words", "[1, 2]", "{broken"):
        error = from_sqlstate("PB404", "missing", "queue_missing", hint)
        assert isinstance(error, NotFound) and error.details == {"hint": hint}
