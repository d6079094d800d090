"""Every log line of a request carries its correlation id (the API Gateway request id) and tenant."""

from __future__ import annotations

import json

from functions.local.lambda_context import LocalContext
from functions.observability import instrument, request_keys


def _event(request_id: str, tenant: str | None) -> dict:
    answer = {"authenticated": True, "tenant_id": tenant} if tenant else {"authenticated": False}
    return {"rawPath": "/x", "requestContext": {"requestId": request_id, "authorizer": {"lambda": answer}}}


def test_request_keys_of_an_api_gateway_event():
    assert request_keys(_event("req-1", "t-1")) == ("req-1", "t-1")
    assert request_keys(_event("req-2", None)) == ("req-2", None)
    assert request_keys({"agent": "x"}) == (None, None)
    assert request_keys(None) == (None, None)


def test_every_line_carries_the_correlation_id_and_tenant(capsys):
    logger, _, lambda_handler = instrument("observability-test")

    @lambda_handler
    def handler(event, context):
        logger.warning("first")
        logger.warning("second")
        return "ok"

    handler(_event("req-1", "tenant-a"), LocalContext("observability-test"))
    handler(_event("req-2", None), LocalContext("observability-test"))
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    logged = [(x["message"], x.get("correlation_id"), x.get("tenant")) for x in lines if "message" in x]
    assert logged == [
        ("first", "req-1", "tenant-a"),
        ("second", "req-1", "tenant-a"),
        ("first", "req-2", None),  # the previous request's tenant does not leak into this one
        ("second", "req-2", None),
    ]


def test_a_metric_record_never_carries_the_previous_requests_tenant(capsys, monkeypatch):
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    _, metrics, lambda_handler = instrument("observability-test")

    @lambda_handler
    def handler(event, context):
        metrics.add_metric(name="Probe", unit="Count", value=1)
        return {"statusCode": 200, "body": ""}

    handler(_event("req-1", "tenant-a"), LocalContext("observability-test"))
    handler(_event("req-2", None), LocalContext("observability-test"))
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [(r.get("tenant"), r["Probe"], r["service"]) for r in records] == [
        ("tenant-a", 1, "observability-test"), (None, 1, "observability-test")]
    assert all(r["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Postbox" for r in records)


def test_a_metric_counted_several_times_in_an_invocation_is_one_value_in_one_record(capsys, monkeypatch):
    """EMF aggregated per invocation: the tenants' table adds up each record's value, which must be a
    number (Powertools keeps a list of what was added), and a request writes one record, not one a count."""
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    _, metrics, lambda_handler = instrument("observability-test")

    @lambda_handler
    def handler(event, context):
        for n in (3, 4, 0.5, 0.5):
            metrics.add_metric(name="Probe", unit="Count", value=n)
        metrics.add_metric(name="Other", unit="Count", value=2)
        return {"statusCode": 200, "body": ""}

    handler(_event("req-1", "tenant-a"), LocalContext("observability-test"))
    (record,) = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert (record["Probe"], record["Other"], record["tenant"]) == (8, 2, "tenant-a")
    assert isinstance(record["Probe"], int)
    assert sorted(m["Name"] for m in record["_aws"]["CloudWatchMetrics"][0]["Metrics"]) == ["Other", "Probe"]
