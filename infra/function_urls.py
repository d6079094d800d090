"""The other front door (`frontDoor: function-url`): each API surface function's own Lambda function
URL, open to the internet (`authorization_type` NONE: the function resolves the request's key
itself, as it does behind API Gateway), with no charge per request beyond Lambda's.

What API Gateway did in front of the functions, the functions do on this door (`functions.door`):
the route table's 404, the payload's 413, the plan's request rate per tenant, and the access line.
What the URL itself does: CORS (its configuration, from `functions.door`'s lists and the stack's
`corsAllowOrigins`, answers preflights). The API as a whole is capped by each surface's reserved
concurrency (`apiReservedConcurrency`, 50 by default on this door).
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from functions import door
from functions import routes as route_table
from infra import streaming
from infra.functions import Deployed
from infra.settings import Settings


def build(s: Settings, fns: dict[str, Deployed]) -> dict[str, aws.lambda_.FunctionUrl]:
    urls: dict[str, aws.lambda_.FunctionUrl] = {}
    for name in route_table.FUNCTIONS:
        fn, qualifier = fns[name].function, fns[name].qualifier  # a SnapStart function's alias
        urls[name] = aws.lambda_.FunctionUrl(
            f"url-{name}",
            function_name=fn.name,
            qualifier=qualifier,
            invoke_mode=streaming.invoke_mode(name),  # the durable surface's SSE reads stream
            authorization_type="NONE",  # the function resolves the key (functions.keys)
            cors=aws.lambda_.FunctionUrlCorsArgs(
                allow_origins=list(s.cors_allow_origins),
                allow_methods=list(door.CORS_ALLOW_METHODS),
                allow_headers=list(door.CORS_ALLOW_HEADERS),
                expose_headers=list(door.CORS_EXPOSE_HEADERS),
                max_age=door.CORS_MAX_AGE_S,
            ),
        )
        # Anyone may call the URL (and only through it: InvokeFunction is granted for URL calls alone).
        aws.lambda_.Permission(f"url-invoke-{name}", action="lambda:InvokeFunctionUrl", function=fn.name,
                               qualifier=qualifier, principal="*", function_url_auth_type="NONE")
        aws.lambda_.Permission(f"url-invoke-function-{name}", action="lambda:InvokeFunction", function=fn.name,
                               qualifier=qualifier, principal="*", invoked_via_function_url=True)
    return urls


def base_urls(urls: dict[str, aws.lambda_.FunctionUrl]) -> pulumi.Output[dict[str, str]]:
    """{surface: its base URL} without the trailing slash, as clients join paths to it."""
    return pulumi.Output.all(**{name: u.function_url for name, u in urls.items()}).apply(
        lambda found: {name: url.rstrip("/") for name, url in found.items()})
