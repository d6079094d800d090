"""The two Lambda layers every function carries: third-party deps, and the `postbox` domain package.

Split in two because they change at different rates: deps.zip (~13 MB) only when
layers/requirements.txt changes, domain.zip on most deploys. Both zips are deterministic, so an
unchanged zip publishes no new layer version.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.artifacts import DEPS_ZIP, DOMAIN_ZIP, archive
from infra.settings import Settings

RUNTIME = "python3.12"
ARCHITECTURE = "arm64"


@dataclass
class Layers:
    deps: aws.lambda_.LayerVersion
    domain: aws.lambda_.LayerVersion

    @property
    def arns(self) -> list[pulumi.Output[str]]:
        return [self.deps.arn, self.domain.arn]


def build(s: Settings) -> Layers:
    def layer(name: str, path, description: str) -> aws.lambda_.LayerVersion:
        return aws.lambda_.LayerVersion(
            name,
            layer_name=f"{s.prefix}-{name}",
            code=archive(path),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description=description,
        )

    return Layers(
        deps=layer("deps", DEPS_ZIP, "psycopg, psycopg_pool, Powertools, pydantic, zstandard"),
        domain=layer("domain", DOMAIN_ZIP, "the postbox domain package"),
    )
