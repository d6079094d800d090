"""The consumer invoker role's policy, as IAM evaluates it for a tenant's session: it invokes that
tenant's consumer functions and no other tenant's, and every name the queues API accepts (the two
rules cannot drift apart)."""

from __future__ import annotations

import fnmatch
import uuid

import pytest
from stack_harness import ACCOUNT, REGION, StackRun, run_stack

from postbox.queues import consumer_functions

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")

TAG_VARIABLE = "${aws:PrincipalTag/postbox-tenant}"


def _invoker_policy(run: StackRun) -> dict:
    invoker = run.one("aws:iam/role:Role", "consumer-invoker")
    [policy] = [p for p in run.of_type("aws:iam/rolePolicy:RolePolicy") if p.inputs["role"] == invoker.id]
    return policy.policy()


def _allows(policy: dict, session_tenant: str, function_name: str) -> bool:
    """lambda:InvokeFunction on the function, for a session tagged with the tenant: the policy
    variable replaced by the tag's value, then IAM's wildcards (`*` any run, `?` one character)."""
    arn = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{function_name}"
    tag = consumer_functions.tenant_token(session_tenant)
    for st in policy["Statement"]:
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
        if st["Effect"] == "Allow" and "lambda:InvokeFunction" in actions and any(
                fnmatch.fnmatchcase(arn, r.replace(TAG_VARIABLE, tag)) for r in resources):
            return True
    return False


def _tenants(n: int) -> list[str]:
    return [str(uuid.uuid4()) for _ in range(n)]


def test_a_tenants_session_invokes_its_own_functions_and_no_one_elses(prod: StackRun):
    policy = _invoker_policy(prod)
    mine, theirs = _tenants(2)
    assert _allows(policy, mine, consumer_functions.prefix(mine) + "send-email")
    assert _allows(policy, mine, consumer_functions.prefix(mine) + "send-email:live")  # its own aliases too
    assert not _allows(policy, mine, consumer_functions.prefix(theirs) + "send-email")
    assert not _allows(policy, mine, "postbox-consumer-send-email")
    assert not _allows(policy, mine, "postbox-prod-consumer-dispatch")


def test_iam_allows_the_names_the_api_accepts_and_only_the_tenants_own(prod: StackRun):
    policy = _invoker_policy(prod)
    tenants = _tenants(3)
    hexes = [consumer_functions.tenant_token(t) for t in tenants]
    names = ["send-email", "postbox-consumer-x", "postbox-consumer--x"]
    for token in hexes:
        names += [f"postbox-consumer-{token}-x", f"postbox-consumer-{token}x", f"postbox-consumer-{token}-",
                  f"postbox-consumer-{token.upper()}-x", f"postbox-consumer-{token}-a_b-C9",
                  f"postbox-consumer-{token[:-1]}-x", f"postbox-consumer-{token}-{token}"[:64]]
    for tenant in tenants:
        for name in names:
            allowed = _allows(policy, tenant, name)
            assert allowed == name.startswith(consumer_functions.prefix(tenant)), (tenant, name)
            invoked = consumer_functions.function_of(tenant, name)  # what a queue naming `name` invokes
            assert invoked is None or _allows(policy, tenant, invoked), (tenant, name, invoked)
        assert sum(_allows(policy, tenant, name) for name in names) == 4  # its own -x, -a_b-C9, -<hex> and -


def test_another_pattern_moves_both_rules(monkeypatch):
    run = run_stack("prod", {"consumerFunctionPattern": "acme-fn-*"})
    policy = _invoker_policy(run)
    monkeypatch.setenv("POSTBOX_CONSUMER_FUNCTION_PATTERN", "acme-fn-*")
    from postbox import config

    config.reset()
    tenant, other = _tenants(2)
    own = consumer_functions.prefix(tenant) + "job"
    assert own.startswith("acme-fn-") and _allows(policy, tenant, own)
    assert not _allows(policy, other, own)


@pytest.mark.parametrize("pattern", ["postbox-consumer-", "a*b*", "*", "x" * 31 + "*", "bad/name-*"])
def test_a_pattern_the_names_cannot_follow_is_refused_at_preview(pattern):
    with pytest.raises(ValueError, match="consumerFunctionPattern"):
        run_stack("prod", {"consumerFunctionPattern": pattern})
